package webhook_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/podagent/internal/callback"
	"github.com/svc-dev/svc/podagent/internal/callback/callbacktest"
	"github.com/svc-dev/svc/shared/wire"
)

// attempts keeps the attempt records the deliverer hands over.
type attempts struct {
	mu      sync.Mutex
	got     []wire.WebhookAttempt
	changed chan struct{} // closed (and dropped) at every Record; made by waitFor
}

func (a *attempts) Record(r wire.WebhookAttempt) {
	a.mu.Lock()
	a.got = append(a.got, r)
	if a.changed != nil {
		close(a.changed)
		a.changed = nil
	}
	a.mu.Unlock()
}

// waitFor returns once an attempt of kind is recorded: the receiver's 200
// reaches the test before the sender has recorded its attempt.
func (a *attempts) waitFor(t *testing.T, kind string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		a.mu.Lock()
		for _, g := range a.got {
			if g.Kind == kind {
				a.mu.Unlock()
				return
			}
		}
		if a.changed == nil {
			a.changed = make(chan struct{})
		}
		ch := a.changed
		a.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("no %s attempt recorded within 30 s; recorded %+v", kind, a.all())
		}
	}
}

func (a *attempts) all() []wire.WebhookAttempt {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]wire.WebhookAttempt(nil), a.got...)
}

// During a rotation's overlap X-Webhook-Secret may carry the old secret or
// the new one; a stranger's is refused, and once the overlap ends the old
// one is too.
func TestIncomingAcceptsTheReplacedSecretDuringTheOverlap(t *testing.T) {
	t.Parallel()
	ev := newEnv(t, opts{})
	ev.src.set(wire.ChannelConfig{Configured: true, ChannelID: channelID, Secret: secret, PreviousSecrets: []string{"old-secret"}}, nil)
	for _, tc := range []struct {
		name, secret string
		status       int
	}{{"new secret", secret, 200}, {"old secret during the overlap", "old-secret", 200}, {"a stranger", "nope", 401},
		{"a prefix of the old secret", "old-secre", 401}} {
		r := ev.do(http.MethodPost, "/incoming", map[string]string{wire.HeaderWebhookSecret: tc.secret}, strings.NewReader(`{"message":"hi"}`))
		if r.status != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, r.status, r.body, tc.status)
		}
	}
	ev.src.set(wire.ChannelConfig{Configured: true, ChannelID: channelID, Secret: secret}, nil)
	if r := ev.do(http.MethodPost, "/incoming", map[string]string{wire.HeaderWebhookSecret: "old-secret"}, strings.NewReader(`{"message":"hi"}`)); r.status != 401 {
		t.Fatalf("old secret after the overlap: %d", r.status)
	}
}

// A reply for an endpoint the API marked failing goes straight to the
// outbox without an attempt; a test message to the endpoint is one signed
// attempt, recorded with kind test.
func TestFailingEndpointSkipsTheCallbackAndATestMessageReachesIt(t *testing.T) {
	t.Parallel()
	rec := &attempts{}
	ev := newEnv(t, opts{recorder: rec})
	rcv := callbacktest.New(t, 200)
	ev.src.set(wire.ChannelConfig{Configured: true, ChannelID: channelID, Secret: secret,
		FailingEndpoints: []string{wire.WebhookEndpoint(rcv.URL + "/cb")}}, nil)
	r := ev.post(`{"message":"to a failing endpoint","callbackUrl":"` + rcv.URL + `/cb?t=1"}`)
	var acc wire.WebhookAccepted
	r.json(t, &acc)
	pr := ev.do(http.MethodGet, "/outbox/"+channelID+"?wait=30", nil, nil)
	var ob wire.OutboxResponse
	pr.json(t, &ob)
	if len(ob.Messages) != 1 || ob.Messages[0].CorrelationID != acc.CorrelationID || len(rcv.Got()) != 0 || len(rec.all()) != 0 {
		t.Fatalf("outbox = %s; receiver got %d, %d attempts recorded (want the outbox and no attempt)", pr.body, len(rcv.Got()), len(rec.all()))
	}

	tr := ev.do(http.MethodPost, "/test-callback", nil, strings.NewReader(`{"callbackUrl":"`+rcv.URL+`/cb"}`))
	var a wire.WebhookAttempt
	tr.json(t, &a)
	if tr.status != 200 || a.Kind != wire.AttemptTest || a.Outcome != wire.AttemptDelivered || a.Status != 200 || len(rcv.Got()) != 1 {
		t.Fatalf("test message: %d %s", tr.status, tr.body)
	}
	if err := callback.Verify(secret, rcv.Got()[0].Body, rcv.Got()[0].Header); err != nil {
		t.Fatalf("test message signature: %v", err)
	}
	if got := rec.all(); len(got) != 1 || got[0].ID != a.ID {
		t.Fatalf("recorded %+v, want the test attempt", got)
	}
	if r := ev.do(http.MethodPost, "/test-callback", map[string]string{wire.HeaderWebhookSecret: "nope"},
		strings.NewReader(`{"callbackUrl":"`+rcv.URL+`"}`)); r.status != 401 {
		t.Fatalf("test message without the channel secret: %d", r.status)
	}
}

// A replay re-sends a reply with the same webhook-id (receivers dedupe), a
// fresh signature, and is recorded with kind replay.
func TestReplayKeepsTheWebhookID(t *testing.T) {
	t.Parallel()
	rec := &attempts{}
	ev := newEnv(t, opts{recorder: rec})
	rcv := callbacktest.New(t, 200)
	r := ev.post(`{"message":"replay me","callbackUrl":"` + rcv.URL + `/cb","metadata":{"k":"v"}}`)
	var acc wire.WebhookAccepted
	r.json(t, &acc)
	first := <-rcv.OK
	body, _ := json.Marshal(wire.WebhookReplay{CorrelationID: acc.CorrelationID, CallbackURL: rcv.URL + "/cb",
		Reply: "echo: replay me", Metadata: json.RawMessage(`{"k":"v"}`)})
	rr := ev.do(http.MethodPost, "/replay", nil, strings.NewReader(string(body)))
	var a wire.WebhookAttempt
	rr.json(t, &a)
	if rr.status != 200 || a.Kind != wire.AttemptReplay || a.Outcome != wire.AttemptDelivered || a.CorrelationID != acc.CorrelationID {
		t.Fatalf("replay: %d %s", rr.status, rr.body)
	}
	again := <-rcv.OK
	if again.Header.Get("webhook-id") != first.Header.Get("webhook-id") || a.WebhookID != first.Header.Get("webhook-id") {
		t.Fatalf("webhook-id %q then %q", first.Header.Get("webhook-id"), again.Header.Get("webhook-id"))
	}
	if string(again.Body) != string(first.Body) {
		t.Fatalf("replayed body %s, want the delivered %s", again.Body, first.Body)
	}
	if err := callback.Verify(secret, again.Body, again.Header); err != nil {
		t.Fatalf("replay signature: %v", err)
	}
	rec.waitFor(t, wire.AttemptDelivery)
	kinds := map[string]int{}
	for _, g := range rec.all() {
		kinds[g.Kind]++
	}
	if kinds[wire.AttemptDelivery] != 1 || kinds[wire.AttemptReplay] != 1 {
		t.Fatalf("recorded kinds %v", kinds)
	}
	if r := ev.do(http.MethodPost, "/replay", nil, strings.NewReader(`{"correlationId":"cor_x","callbackUrl":"ftp://x"}`)); r.status != 400 {
		t.Fatalf("replay to a bad URL: %d %s", r.status, r.body)
	}
}
