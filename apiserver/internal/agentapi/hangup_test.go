package agentapi

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/auth"
	"github.com/svc-dev/svc/apiserver/internal/httpmw"
	"github.com/svc-dev/svc/apiserver/internal/outbox"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/apiserver/internal/webhooklog"
	"github.com/svc-dev/svc/shared/wire"
)

// A pod that hangs up once its payload reached the API server (it stopped
// or was rescheduled while it waited for the answer) loses nothing: the
// late reply, the attempt records and the checkpoint row are kept, so its
// retry after a restart finds them kept (created false) instead of lost.
func TestPayloadKeptWhenThePodHangsUp(t *testing.T) {
	t.Parallel()
	st := storetest.SQLite(t)
	ctx := context.Background()
	p := storetest.Projects(t, st, "one")[0]
	secret := "s3cret"
	ch, err := st.SetChannel(ctx, p.ID, &secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := &API{Store: st, Outbox: outbox.New(st, zap.NewNop()), Attempts: webhooklog.New(st, zap.NewNop(), nil), Log: zap.NewNop()}
	e := echo.New()
	now := time.Now().UTC().Truncate(time.Millisecond)

	// The request's context is cancelled before the handler runs: the pod
	// is gone by the time the write starts.
	hungUp := func(handler echo.HandlerFunc, body any) int {
		t.Helper()
		raw, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		cancel()
		req := httptest.NewRequestWithContext(rctx, http.MethodPost, "/", bytes.NewReader(raw))
		rec := httptest.NewRecorder()
		c := e.NewContext(req, rec)
		c.SetParamNames("id")
		c.SetParamValues(p.ID)
		httpmw.SetPrincipal(c, auth.Principal{ProjectID: p.ID})
		if err := handler(c); err != nil {
			t.Fatalf("handler: %v", err)
		}
		return rec.Code
	}

	put := wire.OutboxPut{ChannelID: ch.ID, OutboxReply: wire.OutboxReply{CorrelationID: "cor_gone", Reply: "late reply",
		Metadata: json.RawMessage(`{}`)}}
	attempts := wire.WebhookAttemptsPut{Attempts: []wire.WebhookAttempt{{ID: "att_gone", ChannelID: ch.ID,
		CorrelationID: "cor_gone", WebhookID: "msg_gone", Kind: wire.AttemptDelivery, Attempt: 1,
		URL: "https://hooks.example/cb", AttemptedAt: now, Status: 503, Outcome: wire.AttemptRetrying}}}
	record := wire.CheckpointRecord{CommitSHA: sha1, CommitSummary: wire.CommitSummary{Message: "turn 1",
		Author: "svc agent <agent@svc.invalid>", Branch: "main"}, CreatedAt: now, Turn: 1}

	for _, tc := range []struct {
		name    string
		handler echo.HandlerFunc
		body    any
		want    int // the pod's own retry: kept already
	}{
		{"outbox reply", a.OutboxPut, put, http.StatusOK},
		{"callback attempts", a.WebhookAttempts, attempts, http.StatusOK},
		{"checkpoint record", a.RecordCheckpoint, record, http.StatusOK},
	} {
		if code := hungUp(tc.handler, tc.body); code >= 300 {
			t.Errorf("%s: the hung-up write answered %d", tc.name, code)
		}
		if code := hungUp(tc.handler, tc.body); code != tc.want {
			t.Errorf("%s: the retry answered %d, want %d (kept by the first)", tc.name, code, tc.want)
		}
	}

	// Afterwards the store holds each payload once.
	if n, err := st.CountOutbox(ctx, p.ID, ch.ID); err != nil || n != 1 {
		t.Errorf("outbox holds %d messages (%v), want 1", n, err)
	}
	if got, err := st.ListWebhookAttempts(ctx, p.ID, "cor_gone", nil, 10); err != nil || len(got) != 1 {
		t.Errorf("attempt log holds %d records (%v), want 1", len(got), err)
	}
	if got, err := st.ListCheckpoints(ctx, p.ID, 10); err != nil || len(got) != 1 || got[0].CommitSHA != sha1 {
		t.Errorf("checkpoints = %+v (%v), want the one record", got, err)
	}
}
