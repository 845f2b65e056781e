package webhookqueue_test

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/apiserver/internal/webhookqueue"
	"github.com/svc-dev/svc/shared/wire"
)

// A receiver that comes back after failures gets the reply from the API
// with the pod's webhook-id, v1 and v1a signatures, attempts numbered after
// the pod's, and the message ends delivered (never served by a poll).
func TestReceiverBackAfterFailuresGetsTheSameWebhookID(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		pid, chID := channel(t, s, "back")
		key, err := wire.NewWebhookSigningKey()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetChannelSigningKey(ctx, pid, key); err != nil {
			t.Fatal(err)
		}
		sk, _ := wire.ParseWebhookSigningKey(key)
		rcv := newReceiver(t, func(_ string, n int) int {
			if n <= 3 {
				return http.StatusServiceUnavailable
			}
			return http.StatusOK
		})
		rcv.pub = sk.Public().(ed25519.PublicKey)
		handOver(t, s, pid, chID, "cor_back1", rcv.srv.URL+"/hook", 503)
		c := &clock{}
		q := newQueue(s, c, "1ms,1h,2h,5h,10h", "a", true, webhookqueue.Options{})
		for _, step := range []time.Duration{time.Second, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour} {
			c.advance(step)
			if n := q.Tick(ctx); n != 1 {
				t.Fatalf("tick after %v handled %d rows, want 1", step, n)
			}
		}
		if n := q.Tick(ctx); n != 0 {
			t.Fatalf("a delivered reply was claimed again (%d)", n)
		}
		rcv.check(t)
		if req, oks := rcv.total(); req != 4 || oks != 1 || rcv.count["msg_back1"] != 4 {
			t.Fatalf("receiver saw %d requests, %d 2xx, by id %v; want 4 of msg_back1, one 2xx", req, oks, rcv.count)
		}
		if !strings.Contains(rcv.bodies["msg_back1"], `"reply":"the reply to cor_back1"`) {
			t.Errorf("body %s", rcv.bodies["msg_back1"])
		}
		m := outboxRow(t, s, pid, "cor_back1")
		if m.Status != wire.OutboxStatusDelivered || m.QueueState != store.QueueDelivered || m.NextAttemptAt != nil || m.QueueAttempts != 4 {
			t.Fatalf("row after delivery: %+v", m)
		}
		as := attempts(t, s, pid, "cor_back1")
		if len(as) != 5 {
			t.Fatalf("%d attempts in the log, want the pod's and 4 of the API", len(as))
		}
		for i, a := range as[1:] {
			want := wire.AttemptRetrying
			if i == 3 {
				want = wire.AttemptDelivered
			}
			if a.Attempt != 9+i || a.WebhookID != "msg_back1" || a.Outcome != want || a.Kind != wire.AttemptDelivery {
				t.Errorf("attempt %d: %+v", i, a)
			}
			if want == wire.AttemptRetrying && a.NextRetryAt == nil {
				t.Errorf("attempt %d has no next retry time", i)
			}
		}
		if got, _ := s.TakeOutbox(ctx, pid, chID, 10); len(got) != 0 {
			t.Fatalf("a poll returned a delivered reply: %+v", got)
		}
	})
}

// A poll that takes the reply ends its queue: no further attempt, and a
// reply under an attempt's lease is not served until the attempt ends.
func TestTakingFromTheOutboxCancelsTheDelivery(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		pid, chID := channel(t, s, "take")
		rcv := newReceiver(t, func(string, int) int { return http.StatusBadGateway })
		handOver(t, s, pid, chID, "cor_take1", rcv.srv.URL+"/hook", 0)
		c := &clock{}
		q := newQueue(s, c, "1ms,1h,1h,1h", "a", true, webhookqueue.Options{})
		c.advance(time.Second)

		// While the attempt is in flight (the receiver holds it), a poll
		// does not get the reply.
		rcv.gate = make(chan struct{})
		done := make(chan int)
		go func() { done <- q.Tick(ctx) }()
		eventually(t, 10*time.Second, "the attempt reaches the receiver", func() bool { n, _ := rcv.total(); return n == 1 })
		if got, err := s.TakeOutbox(ctx, pid, chID, 10); err != nil || len(got) != 0 {
			t.Fatalf("a poll took a reply under an attempt's lease: %+v %v", got, err)
		}
		close(rcv.gate)
		if n := <-done; n != 1 {
			t.Fatalf("tick handled %d", n)
		}
		got, err := s.TakeOutbox(ctx, pid, chID, 10)
		if err != nil || len(got) != 1 || got[0].CorrelationID != "cor_take1" {
			t.Fatalf("poll after the failed attempt = %+v %v", got, err)
		}
		m := outboxRow(t, s, pid, "cor_take1")
		if m.QueueState != store.QueueTaken || m.NextAttemptAt != nil {
			t.Fatalf("row after the take: %+v", m)
		}
		c.advance(10 * time.Hour)
		if n := q.Tick(ctx); n != 0 {
			t.Fatalf("a taken reply was claimed (%d)", n)
		}
		if again, _ := s.TakeOutbox(ctx, pid, chID, 10); len(again) != 0 {
			t.Fatalf("taken twice: %+v", again)
		}
		if n, _ := rcv.total(); n != 1 {
			t.Fatalf("receiver saw %d requests, want 1", n)
		}
		if as := attempts(t, s, pid, "cor_take1"); len(as) != 2 {
			t.Fatalf("%d attempts logged, want 2", len(as))
		}
	})
}

// 410 Gone from the API's attempt disables the endpoint (the failing
// state): the queue stops, and replies for it stay in the outbox without
// an attempt.
func TestGoneDisablesTheEndpoint(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		pid, chID := channel(t, s, "gone")
		rcv := newReceiver(t, func(string, int) int { return http.StatusGone })
		url := rcv.srv.URL + "/hook"
		handOver(t, s, pid, chID, "cor_gone1", url, 503)
		c := &clock{}
		q := newQueue(s, c, "1ms,1ms", "a", true, webhookqueue.Options{})
		c.advance(time.Second)
		if n := q.Tick(ctx); n != 1 {
			t.Fatalf("tick handled %d", n)
		}
		if failing, _ := s.EndpointFailing(ctx, pid, wire.WebhookEndpoint(url)); !failing {
			t.Fatal("the endpoint is not failing after a 410")
		}
		if m := outboxRow(t, s, pid, "cor_gone1"); m.QueueState != store.QueueStopped || m.NextAttemptAt != nil || m.DeliveredAt != nil {
			t.Fatalf("row after 410: %+v", m)
		}
		// The pod's final failure was before the 410 came in: a second
		// reply for the endpoint is not attempted.
		handOver(t, s, pid, chID, "cor_gone2", url+"?t=2", 503)
		c.advance(time.Second)
		q.Tick(ctx)
		if n, _ := rcv.total(); n != 1 {
			t.Fatalf("receiver saw %d requests, want 1", n)
		}
		if m := outboxRow(t, s, pid, "cor_gone2"); m.QueueState != store.QueueStopped {
			t.Fatalf("second reply: %+v", m)
		}
		if got, _ := s.TakeOutbox(ctx, pid, chID, 10); len(got) != 2 {
			t.Fatalf("the replies are not in the outbox: %+v", got)
		}
	})
}

// The API's SSRF guard refuses a loopback target unless
// SVC_CALLBACK_ALLOWED_NETS lets it through: the refusal is a failed
// attempt in the log, the queue stops, and nothing reaches the receiver.
func TestGuardRefusesLoopbackUnlessAllowed(t *testing.T) {
	t.Parallel()
	s := storetest.SQLite(t)
	ctx := context.Background()
	pid, chID := channel(t, s, "ssrf")
	rcv := newReceiver(t, func(string, int) int { return http.StatusOK })
	for _, allowed := range []bool{false, true} {
		corr := fmt.Sprintf("cor_ssrf_%v", allowed)
		handOver(t, s, pid, chID, corr, rcv.srv.URL+"/hook", 503)
		c := &clock{off: time.Second}
		if n := newQueue(s, c, "1ms", "a", allowed, webhookqueue.Options{}).Tick(ctx); n != 1 {
			t.Fatalf("tick handled %d", n)
		}
		m := outboxRow(t, s, pid, corr)
		as := attempts(t, s, pid, corr)
		last := as[len(as)-1]
		if !allowed {
			if m.QueueState != store.QueueStopped || last.Outcome != wire.AttemptFailed || !strings.Contains(last.Error, "refused") {
				t.Fatalf("refused target: row %+v, attempt %+v", m, last)
			}
			if n, _ := rcv.total(); n != 0 {
				t.Fatalf("the receiver got %d requests through the guard", n)
			}
			continue
		}
		if m.QueueState != store.QueueDelivered || last.Outcome != wire.AttemptDelivered {
			t.Fatalf("allowed target: row %+v, attempt %+v", m, last)
		}
	}
}

// The API takes over only what the pod's last attempt left worth
// retrying; a reply without attempts (a sync reply) is dropped from the
// queue after the grace period.
func TestTakeOverRule(t *testing.T) {
	t.Parallel()
	s := storetest.SQLite(t)
	ctx := context.Background()
	pid, chID := channel(t, s, "rule")
	rcv := newReceiver(t, func(string, int) int { return http.StatusOK })
	handOver(t, s, pid, chID, "cor_rule400", rcv.srv.URL+"/hook", 400)
	handOver(t, s, pid, chID, "cor_rule301", rcv.srv.URL+"/hook", 301)
	now := time.Now()
	if _, _, err := s.PutOutbox(ctx, store.OutboxMessage{ProjectID: pid, ChannelID: chID, CorrelationID: "cor_sync",
		Reply: "r", NextAttemptAt: &now}); err != nil {
		t.Fatal(err)
	}
	c := &clock{off: time.Second}
	q := newQueue(s, c, "1ms", "a", true, webhookqueue.Options{Grace: time.Minute})
	if n := q.Tick(ctx); n != 3 {
		t.Fatalf("tick handled %d", n)
	}
	if m := outboxRow(t, s, pid, "cor_sync"); m.QueueState != store.QueueQueued || m.NextAttemptAt == nil {
		t.Fatalf("a young reply without attempts: %+v, want it queued for the grace period", m)
	}
	c.advance(2 * time.Minute)
	q.Tick(ctx)
	for _, corr := range []string{"cor_rule400", "cor_rule301", "cor_sync"} {
		if m := outboxRow(t, s, pid, corr); m.QueueState != store.QueueStopped || m.QueueAttempts != 0 {
			t.Errorf("%s: %+v, want stopped without an attempt", corr, m)
		}
	}
	if n, _ := rcv.total(); n != 0 {
		t.Fatalf("receiver saw %d requests", n)
	}
}

// Two replicas (two stores and queues on one PostgreSQL database) deliver
// a batch concurrently: no attempt is made twice — each webhook-id gets
// exactly its three requests (two 503s, then a 2xx), never two at once,
// and the attempt log has exactly the receiver's count.
func TestTwoReplicasNeverSendTheSameAttemptTwice(t *testing.T) {
	t.Parallel()
	url := storetest.PostgresURL(t)
	stores := make([]*store.Store, 2)
	for i := range stores {
		s, err := store.Open(url, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		stores[i] = s
	}
	pid, chID := channel(t, stores[0], "two")
	rcv := newReceiver(t, func(_ string, n int) int {
		if n <= 2 {
			return http.StatusServiceUnavailable
		}
		return http.StatusNoContent
	})
	const msgs = 60
	for i := range msgs {
		handOver(t, stores[0], pid, chID, fmt.Sprintf("cor_two%03d", i), rcv.srv.URL+"/hook", 503)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i, s := range stores {
		q := newQueue(s, nil, "1ms,1ms,1ms,1ms", fmt.Sprintf("replica%d", i), true,
			webhookqueue.Options{Concurrency: 6, PollInterval: 5 * time.Millisecond})
		wg.Add(1)
		go func() { defer wg.Done(); q.Run(ctx) }()
	}
	eventually(t, 60*time.Second, "every reply delivered", func() bool { _, oks := rcv.total(); return oks >= msgs })
	cancel()
	wg.Wait()
	rcv.check(t)
	requests, oks := rcv.total()
	if oks != msgs || requests != 3*msgs {
		t.Fatalf("receiver saw %d requests and %d 2xx, want %d and %d", requests, oks, 3*msgs, msgs)
	}
	for id, n := range rcv.count {
		if n != 3 {
			t.Errorf("%s: %d requests", id, n)
		}
	}
	var logged int64
	if err := stores[1].DB().QueryRow(`SELECT count(*) FROM webhook_attempts WHERE project_id = $1 AND attempt > 8`, pid).Scan(&logged); err != nil {
		t.Fatal(err)
	}
	if logged != int64(requests) {
		t.Fatalf("attempt log has %d of the API's attempts, the receiver counted %d", logged, requests)
	}
}
