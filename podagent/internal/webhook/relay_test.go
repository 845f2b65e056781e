package webhook_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/svc-dev/svc/podagent/internal/outbox"
	"github.com/svc-dev/svc/shared/wire"
)

// poster is the API's outbox endpoint: it accepts every message and reports it.
type poster chan wire.OutboxPut

func (p poster) PutOutbox(_ context.Context, m wire.OutboxPut) (wire.OutboxPutResponse, error) {
	p <- m
	return wire.OutboxPutResponse{ID: "obx_1", Created: true}, nil
}

// In production the late reply goes to the relay, which hands it to the
// API's durable outbox; the pod does not serve the outbox path itself (the
// API does, from its database).
func TestSyncTimeoutReplyGoesToTheAPIOutbox(t *testing.T) {
	t.Parallel()
	api := make(poster, 4)
	relay, err := outbox.OpenRelay(outbox.RelayOptions{Dir: t.TempDir(), Poster: api, Log: logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ev := newEnv(t, opts{syncTimeout: 50 * time.Millisecond, outbox: relay})
	release, r, eb := slowJob(t, ev)
	if r.status != http.StatusGatewayTimeout || eb.Error.Code != "reply_timeout" {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	close(release)
	put := <-api
	if put.ChannelID != channelID || put.CorrelationID != eb.Error.CorrelationID || put.Reply != "late: slow job" ||
		string(put.Metadata) != `{"k":"v"}` || put.CreatedAt.IsZero() {
		t.Fatalf("put = %+v", put)
	}
	if r := ev.do(http.MethodGet, "/outbox/"+channelID, nil, nil); r.status != http.StatusNotFound {
		t.Fatalf("the pod's own outbox route: %d %s, want 404 (the API serves it)", r.status, r.body)
	}
	// Shutdown closes the relay: nothing is left to hand over.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ev.h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if relay.Pending() != 0 {
		t.Fatalf("pending after shutdown: %d", relay.Pending())
	}
}
