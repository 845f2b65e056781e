package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/server"
	"github.com/svc-dev/svc/apiserver/internal/server/servertest"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/apiserver/internal/webhookqueue"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/runtimetoken"
	"github.com/svc-dev/svc/shared/testenv/testhttp"
	"github.com/svc-dev/svc/shared/webhooksend"
	"github.com/svc-dev/svc/shared/wire"
)

// The API takes over the long tail with no pod at all: the pod's outbox
// hand-over and its attempt log arrive through the internal API (the typed
// client the pod uses), and the API's queue delivers the reply to the
// receiver with the pod's webhook-id and a v1 signature that verifies. The
// range replay route then re-sends it (202, one attempt of kind replay).
func TestAPIDeliversWhatThePodHandedOver(t *testing.T) {
	t.Parallel()
	db := storetest.SQLite(t)
	srv := servertest.New(t, server.Deps{Store: db,
		// The queue's clock runs a minute ahead: the reply is due at once.
		WebhookQueue: webhookqueue.Options{Schedule: webhookqueue.MustSchedule("1s,1s"),
			Now: func() time.Time { return time.Now().Add(time.Minute) }},
		CallbackAllowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	acct := servertest.NewAccount(t, db)
	ctx := context.Background()
	p, err := db.CreateProject(ctx, acct.WorkspaceID, "hook")
	if err != nil {
		t.Fatal(err)
	}
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	ch, err := db.SetChannel(ctx, p.ID, &secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []http.Header
	var bad []string
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		got = append(got, r.Header.Clone())
		if err := webhooksend.Verify(secret, body, r.Header); err != nil {
			bad = append(bad, err.Error())
		}
		if !strings.Contains(string(body), `"correlationId":"cor_e2e"`) {
			bad = append(bad, "body "+string(body))
		}
	}))
	t.Cleanup(rcv.Close)

	pod := &internalapi.Client{BaseURL: srv.URL, ProjectID: p.ID, Token: runtimetoken.Mint([]byte(servertest.RuntimeSecret), p.ID),
		HTTP: http.DefaultClient, Timeout: 10 * time.Second}
	if _, err := pod.PutWebhookAttempts(ctx, wire.WebhookAttemptsPut{Attempts: []wire.WebhookAttempt{{
		ID: webhooksend.NewAttemptID(), ChannelID: ch.ID, CorrelationID: "cor_e2e", WebhookID: "msg_e2e",
		Kind: wire.AttemptDelivery, Attempt: 8, URL: rcv.URL + "/hook", AttemptedAt: time.Now().UTC(),
		Error: "dial tcp: connection refused", Outcome: wire.AttemptFailed}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := pod.PutOutbox(ctx, wire.OutboxPut{ChannelID: ch.ID, OutboxReply: wire.OutboxReply{CorrelationID: "cor_e2e",
		Reply: "late but here", Metadata: json.RawMessage(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	if n := srv.Queue.Tick(ctx); n != 1 {
		t.Fatalf("the queue handled %d replies, want the handed-over one", n)
	}
	if m, _ := db.GetOutboxMessage(ctx, p.ID, "cor_e2e"); m.QueueState != store.QueueDelivered || m.Status != wire.OutboxStatusDelivered {
		t.Fatalf("after the API's attempt: %+v", m)
	}
	mu.Lock()
	if len(got) != 1 || got[0].Get(webhooksend.HeaderID) != "msg_e2e" || len(bad) > 0 {
		t.Fatalf("receiver got %d callbacks (%v), problems %v", len(got), got, bad)
	}
	mu.Unlock()

	do := func(secret, body string) (int, []byte) {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/api/projects/"+p.ID+"/channels/webhook/replay", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(wire.HeaderWebhookSecret, secret)
		req.Header.Set("Content-Type", "application/json")
		res, b := testhttp.Do(t, http.DefaultClient, req, acct.Key)
		return res.StatusCode, b
	}
	if code, b := do("whsec_wrong", `{}`); code != http.StatusUnauthorized {
		t.Fatalf("replay with a wrong secret: %d %s", code, b)
	}
	if code, b := do(secret, `{"status":"lost"}`); code != http.StatusBadRequest || !strings.Contains(string(b), wire.CodeInvalidReplayRange) {
		t.Fatalf("replay of an unknown state: %d %s", code, b)
	}
	code, b := do(secret, `{"status":"delivered"}`)
	var started wire.WebhookReplayStarted
	if code != http.StatusAccepted || json.Unmarshal(b, &started) != nil || started.Messages != 1 {
		t.Fatalf("replay: %d %s", code, b)
	}
	srv.Recovery.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[1].Get(webhooksend.HeaderID) != "msg_e2e" || len(bad) > 0 {
		t.Fatalf("after the replay the receiver got %d callbacks, problems %v", len(got), bad)
	}
	rows, err := db.ListWebhookAttempts(ctx, p.ID, "cor_e2e", nil, 10)
	if err != nil || len(rows) != 3 || rows[0].Kind != wire.AttemptReplay || rows[1].Attempt != 9 || rows[1].Outcome != wire.AttemptDelivered {
		t.Fatalf("attempt log: %+v %v", rows, err)
	}
}

// A pod stopped mid-schedule hands its reply over with the callback it was
// on (continue): the API's queue sends at its first claim, numbering after
// the pod's attempts, although the pod's last record says "retrying" — a
// reply handed over without it waits for the pod's final record first.
func TestAPIContinuesAPodStoppedMidSchedule(t *testing.T) {
	t.Parallel()
	db := storetest.SQLite(t)
	srv := servertest.New(t, server.Deps{Store: db,
		WebhookQueue: webhookqueue.Options{Schedule: webhookqueue.MustSchedule("1s,1s"),
			Now: func() time.Time { return time.Now().Add(time.Minute) }},
		CallbackAllowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	acct := servertest.NewAccount(t, db)
	ctx := context.Background()
	p, err := db.CreateProject(ctx, acct.WorkspaceID, "hook")
	if err != nil {
		t.Fatal(err)
	}
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	ch, err := db.SetChannel(ctx, p.ID, &secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[string]int{} // by webhook-id
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.Header.Get(webhooksend.HeaderID)]++
		mu.Unlock()
	}))
	t.Cleanup(rcv.Close)
	pod := &internalapi.Client{BaseURL: srv.URL, ProjectID: p.ID, Token: runtimetoken.Mint([]byte(servertest.RuntimeSecret), p.ID),
		HTTP: http.DefaultClient, Timeout: 10 * time.Second}
	for _, c := range []struct {
		corr   string
		resume bool
	}{{"cor_stopped", true}, {"cor_pending", false}} {
		id := "msg_" + strings.TrimPrefix(c.corr, "cor_")
		if _, err := pod.PutWebhookAttempts(ctx, wire.WebhookAttemptsPut{Attempts: []wire.WebhookAttempt{{
			ID: webhooksend.NewAttemptID(), ChannelID: ch.ID, CorrelationID: c.corr, WebhookID: id,
			Kind: wire.AttemptDelivery, Attempt: 2, URL: rcv.URL + "/hook", AttemptedAt: time.Now().UTC(), Status: 503,
			Error: "callback answered 503", NextRetryAt: time.Now().Add(time.Minute).UTC(), Outcome: wire.AttemptRetrying}}}); err != nil {
			t.Fatal(err)
		}
		put := wire.OutboxPut{ChannelID: ch.ID, OutboxReply: wire.OutboxReply{CorrelationID: c.corr, Reply: "r", Metadata: json.RawMessage(`{}`)}}
		if c.resume {
			put.Continue = &wire.OutboxContinue{CallbackURL: rcv.URL + "/hook", WebhookID: id, Attempts: 2}
		}
		if _, err := pod.PutOutbox(ctx, put); err != nil {
			t.Fatal(err)
		}
	}
	if n := srv.Queue.Tick(ctx); n != 2 {
		t.Fatalf("the queue handled %d replies, want 2", n)
	}
	if m, _ := db.GetOutboxMessage(ctx, p.ID, "cor_stopped"); m.QueueState != store.QueueDelivered {
		t.Fatalf("the continued reply: %+v", m)
	}
	if m, _ := db.GetOutboxMessage(ctx, p.ID, "cor_pending"); m.QueueState != store.QueueQueued || m.QueueAttempts != 0 {
		t.Fatalf("the reply without continue: %+v (it waits for the pod's final record)", m)
	}
	mu.Lock()
	if len(got) != 1 || got["msg_stopped"] != 1 {
		t.Fatalf("receiver got %v, want msg_stopped once", got)
	}
	mu.Unlock()
	as, err := db.ListWebhookAttempts(ctx, p.ID, "cor_stopped", nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 2 || as[0].Attempt != 3 || as[0].WebhookID != "msg_stopped" || as[0].Outcome != wire.AttemptDelivered {
		t.Fatalf("attempt log, newest first: %+v; want the API's attempt 3 after the pod's 2", as)
	}
}
