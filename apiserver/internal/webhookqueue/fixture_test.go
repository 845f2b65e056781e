package webhookqueue_test

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/apiserver/internal/webhooklog"
	"github.com/svc-dev/svc/apiserver/internal/webhookqueue"
	"github.com/svc-dev/svc/shared/webhooksend"
	"github.com/svc-dev/svc/shared/wire"
)

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// receiver is a real loopback HTTP receiver: it verifies every callback
// (v1 with the Standard Webhooks library, v1a by hand when it knows the
// public key), counts requests per webhook-id, and reports any two
// requests of one webhook-id in flight at once.
type receiver struct {
	srv *httptest.Server
	// answer is the status of the n-th (1-based) request of a webhook-id.
	answer func(id string, n int) int
	pub    ed25519.PublicKey

	mu       sync.Mutex
	count    map[string]int
	ok       map[string]int
	inflight map[string]int
	bodies   map[string]string
	overlaps int
	bad      []string
	gate     chan struct{} // when set, a request waits for it
}

func newReceiver(t *testing.T, answer func(id string, n int) int) *receiver {
	r := &receiver{answer: answer, count: map[string]int{}, ok: map[string]int{}, inflight: map[string]int{}, bodies: map[string]string{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	id := req.Header.Get(webhooksend.HeaderID)
	r.mu.Lock()
	r.count[id]++
	n := r.count[id]
	r.inflight[id]++
	if r.inflight[id] > 1 {
		r.overlaps++
	}
	r.bodies[id] = string(body)
	if err := webhooksend.Verify(testSecret, body, req.Header); err != nil {
		r.bad = append(r.bad, id+": v1: "+err.Error())
	}
	if r.pub != nil && !verifyV1a(r.pub, id, req.Header, body) {
		r.bad = append(r.bad, id+": no valid v1a signature")
	}
	gate := r.gate
	r.mu.Unlock()
	if gate != nil {
		<-gate
	}
	status := r.answer(id, n)
	r.mu.Lock()
	r.inflight[id]--
	if status >= 200 && status < 300 {
		r.ok[id]++
	}
	r.mu.Unlock()
	w.WriteHeader(status)
}

// verifyV1a checks a v1a entry of webhook-signature with Go's ed25519, as
// the Standard Webhooks specification describes it.
func verifyV1a(pub ed25519.PublicKey, id string, h http.Header, body []byte) bool {
	msg := id + "." + h.Get(webhooksend.HeaderTimestamp) + "." + string(body)
	for _, e := range strings.Fields(h.Get(webhooksend.HeaderSignature)) {
		sig, ok := strings.CutPrefix(e, "v1a,")
		if !ok {
			continue
		}
		b, err := base64.StdEncoding.DecodeString(sig)
		if err == nil && ed25519.Verify(pub, []byte(msg), b) {
			return true
		}
	}
	return false
}

func (r *receiver) total() (requests, oks int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.count {
		requests += n
	}
	for _, n := range r.ok {
		oks += n
	}
	return requests, oks
}

func (r *receiver) check(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.overlaps > 0 {
		t.Errorf("%d requests of a webhook-id arrived while another of the same id was in flight", r.overlaps)
	}
	if len(r.bad) > 0 {
		t.Errorf("signatures that do not verify: %v", r.bad[:min(len(r.bad), 5)])
	}
}

// clock runs ahead of the real time by off (never behind it: signatures
// and attempt records use the real time).
type clock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off += d
}

// channel makes a project with a webhook channel.
func channel(t testing.TB, s *store.Store, name string) (projectID, channelID string) {
	t.Helper()
	p := storetest.Projects(t, s, name)[0]
	sec := testSecret
	ch, err := s.SetChannel(context.Background(), p.ID, &sec, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p.ID, ch.ID
}

// handOver does what the pod does after its attempts failed: the reply
// goes to the outbox (queued now, as outbox.Put queues it) and the attempt
// log has its last attempt (attempt 8, answered podStatus; 0: a network
// error).
func handOver(t testing.TB, s *store.Store, pid, chID, corr, url string, podStatus int) {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	if _, _, err := s.PutOutbox(ctx, store.OutboxMessage{ProjectID: pid, ChannelID: chID, CorrelationID: corr,
		Reply: "the reply to " + corr, Metadata: `{"k":"v"}`, NextAttemptAt: &now}); err != nil {
		t.Fatal(err)
	}
	a := wire.WebhookAttempt{ID: webhooksend.NewAttemptID(), ChannelID: chID, CorrelationID: corr, WebhookID: webhookID(corr),
		Kind: wire.AttemptDelivery, Attempt: 8, URL: url, AttemptedAt: now.Add(-time.Second), Status: podStatus,
		Outcome: wire.AttemptFailed}
	if podStatus == 0 {
		a.Error = "dial tcp: connection refused"
	} else {
		a.Error = fmt.Sprintf("callback answered %d", podStatus)
	}
	if _, _, err := s.RecordWebhookAttempts(ctx, []store.WebhookAttempt{webhooklog.ToRow(pid, a)}, time.Hour, now); err != nil {
		t.Fatal(err)
	}
}

func webhookID(corr string) string { return "msg_" + strings.TrimPrefix(corr, "cor_") }

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// newQueue is a queue over s whose guard lets loopback through when
// allowLoopback.
func newQueue(s *store.Store, c *clock, schedule, owner string, allowLoopback bool, o webhookqueue.Options) *webhookqueue.Queue {
	var allowed []netip.Prefix
	if allowLoopback {
		allowed = loopback
	}
	sender := webhooksend.NewSender(webhooksend.NewGuard(allowed), nil, 10*time.Second, nil)
	o.Schedule = webhookqueue.MustSchedule(schedule)
	o.Owner = owner
	if c != nil {
		o.Now = c.Now
	}
	return webhookqueue.New(s, sender, webhookqueue.NewThrottle(o.Concurrency, 1000), webhooklog.New(s, nil, nil), o, nil, nil)
}

// outboxRow reads a message's outbox row.
func outboxRow(t testing.TB, s *store.Store, pid, corr string) store.OutboxMessage {
	t.Helper()
	m, err := s.GetOutboxMessage(context.Background(), pid, corr)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// attempts lists a message's attempts, oldest first.
func attempts(t testing.TB, s *store.Store, pid, corr string) []store.WebhookAttempt {
	t.Helper()
	rows, err := s.ListWebhookAttempts(context.Background(), pid, corr, nil, 200)
	if err != nil {
		t.Fatal(err)
	}
	for i, j := 0, len(rows)-1; i < j; i, j = i+1, j-1 {
		rows[i], rows[j] = rows[j], rows[i]
	}
	return rows
}

// eventually polls cond every 20 ms for up to d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
