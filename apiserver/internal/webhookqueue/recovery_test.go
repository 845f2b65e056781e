package webhookqueue_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/apiserver/internal/webhooklog"
	"github.com/svc-dev/svc/apiserver/internal/webhookqueue"
	"github.com/svc-dev/svc/shared/webhooksend"
	"github.com/svc-dev/svc/shared/wire"
)

// One call replays the channel's delivered replies of a time range: one
// attempt each (kind replay, the pod's webhook-id), each in the log; other
// states and times are left alone, and a second replay of the project
// waits for the first.
func TestReplayRangeByStatus(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		pid, chID := channel(t, s, "replay")
		rcv := newReceiver(t, func(string, int) int { return http.StatusOK })
		url := rcv.srv.URL + "/hook"
		t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		put := func(corr string, at time.Time, status string) {
			t.Helper()
			if _, _, err := s.PutOutbox(ctx, store.OutboxMessage{ProjectID: pid, ChannelID: chID, CorrelationID: corr,
				Reply: "r " + corr, CreatedAt: at, Status: status}); err != nil {
				t.Fatal(err)
			}
			outcome := wire.AttemptFailed
			if status == wire.OutboxStatusDelivered {
				outcome = wire.AttemptDelivered
			}
			a := wire.WebhookAttempt{ID: webhooksend.NewAttemptID(), ChannelID: chID, CorrelationID: corr, WebhookID: webhookID(corr),
				Kind: wire.AttemptDelivery, Attempt: 1, URL: url, AttemptedAt: at, Status: 200, Outcome: outcome}
			if _, _, err := s.RecordWebhookAttempts(ctx, []store.WebhookAttempt{webhooklog.ToRow(pid, a)}, time.Hour, at); err != nil {
				t.Fatal(err)
			}
		}
		put("cor_d1", t0, wire.OutboxStatusDelivered)
		put("cor_d2", t0.Add(time.Hour), wire.OutboxStatusDelivered)
		put("cor_late", t0.Add(3*time.Hour), wire.OutboxStatusDelivered)
		put("cor_o1", t0.Add(time.Hour), "")
		ch, err := s.GetChannel(ctx, pid)
		if err != nil {
			t.Fatal(err)
		}
		sender := webhooksend.NewSender(webhooksend.NewGuard(loopback), nil, 10*time.Second, nil)
		r := webhookqueue.NewRecovery(s, sender, webhookqueue.NewThrottle(2, 1000), webhooklog.New(s, nil, nil), nil)

		rcv.gate = make(chan struct{})
		got, err := r.Start(ctx, pid, ch, wire.WebhookReplayRange{Since: t0, Until: t0.Add(2 * time.Hour), Status: wire.MessageDelivered})
		if err != nil {
			t.Fatal(err)
		}
		if got.Messages != 2 || got.Skipped != 0 || got.Truncated {
			t.Fatalf("started %+v, want 2 messages", got)
		}
		var we *wire.Error
		if _, err := r.Start(ctx, pid, ch, wire.WebhookReplayRange{}); !errors.As(err, &we) || we.Code != wire.CodeReplayInProgress {
			t.Fatalf("a second replay while one runs: %v", err)
		}
		close(rcv.gate)
		r.Wait()
		rcv.check(t)
		if n, _ := rcv.total(); n != 2 || rcv.count["msg_d1"] != 1 || rcv.count["msg_d2"] != 1 {
			t.Fatalf("receiver saw %v", rcv.count)
		}
		for _, corr := range []string{"cor_d1", "cor_d2"} {
			as := attempts(t, s, pid, corr)
			if len(as) != 2 || as[1].Kind != wire.AttemptReplay || as[1].Outcome != wire.AttemptDelivered || as[1].WebhookID != webhookID(corr) {
				t.Fatalf("%s attempts: %+v", corr, as)
			}
		}
		if _, err := r.Start(ctx, pid, ch, wire.WebhookReplayRange{Status: "failed"}); !errors.As(err, &we) || we.Code != wire.CodeInvalidReplayRange {
			t.Fatalf("an unknown status: %v", err)
		}
	})
}

// The throttle bounds attempts in flight per endpoint, and a 429 halves
// the bound and the rate; successes raise them back.
func TestThrottleInFlightAndAIMD(t *testing.T) {
	t.Parallel()
	th := webhookqueue.NewThrottle(4, 1000)
	ctx := context.Background()
	var dones []func(int)
	for range 4 {
		d, err := th.Acquire(ctx, "https://a/x")
		if err != nil {
			t.Fatal(err)
		}
		dones = append(dones, d)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	if _, err := th.Acquire(short, "https://a/x"); err == nil {
		t.Fatal("a fifth attempt started with four in flight")
	}
	cancel()
	if d, err := th.Acquire(ctx, "https://b/x"); err != nil {
		t.Fatal("another endpoint waited:", err)
	} else {
		d(200)
	}
	dones[0](http.StatusTooManyRequests)
	if inflight, rate := th.Limits("https://a/x"); inflight != 2 || rate != 500 {
		t.Fatalf("after a 429: in flight %d, rate %v; want 2 and 500", inflight, rate)
	}
	for _, d := range dones[1:] {
		d(http.StatusOK)
	}
	if inflight, rate := th.Limits("https://a/x"); inflight != 4 || rate != 800 {
		t.Fatalf("after three 2xx: in flight %d, rate %v; want 4 and 800", inflight, rate)
	}
}

// A replay's pending sends live in the database: the replica that took
// the call may stop before sending any (its marks wait for any replica)
// or after claiming some (they wait for its lease to run out); another
// replica sends each message exactly once.
func TestReplaySurvivesItsReplica(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		pid, chID := channel(t, s, "replay-durable")
		rcv := newReceiver(t, func(string, int) int { return http.StatusOK })
		url := rcv.srv.URL + "/hook"
		at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		for i, corr := range []string{"cor_a", "cor_b", "cor_c"} {
			if _, _, err := s.PutOutbox(ctx, store.OutboxMessage{ProjectID: pid, ChannelID: chID, CorrelationID: corr,
				Reply: "r " + corr, CreatedAt: at.Add(time.Duration(i) * time.Minute), Status: wire.OutboxStatusDelivered}); err != nil {
				t.Fatal(err)
			}
			a := wire.WebhookAttempt{ID: webhooksend.NewAttemptID(), ChannelID: chID, CorrelationID: corr, WebhookID: webhookID(corr),
				Kind: wire.AttemptDelivery, Attempt: 1, URL: url, AttemptedAt: at, Status: 200, Outcome: wire.AttemptDelivered}
			if _, _, err := s.RecordWebhookAttempts(ctx, []store.WebhookAttempt{webhooklog.ToRow(pid, a)}, time.Hour, at); err != nil {
				t.Fatal(err)
			}
		}
		ch, err := s.GetChannel(ctx, pid)
		if err != nil {
			t.Fatal(err)
		}
		sender := webhooksend.NewSender(webhooksend.NewGuard(loopback), nil, 10*time.Second, nil)
		newReplica := func() *webhookqueue.Recovery {
			return webhookqueue.NewRecovery(s, sender, webhookqueue.NewThrottle(4, 1000), webhooklog.New(s, nil, nil), nil)
		}
		a := newReplica() // takes the call, then stops without sending
		got, err := a.Start(ctx, pid, ch, wire.WebhookReplayRange{})
		if err != nil || got.Messages != 3 {
			t.Fatalf("start: %+v %v", got, err)
		}
		// A dead replica's claim on one of them (it stopped mid-send).
		lease := time.Now().Add(time.Second)
		claimed, err := s.ClaimReplays(ctx, "rpl_dead", time.Now(), lease, 1)
		if err != nil || len(claimed) != 1 {
			t.Fatalf("claim: %v %v", claimed, err)
		}
		b := newReplica()
		b.Wait()
		if n, _ := rcv.total(); n != 2 || rcv.count[claimed[0].ReplayWebhookID] != 0 {
			t.Fatalf("before the lease ran out the receiver saw %v, want the two unclaimed", rcv.count)
		}
		var we *wire.Error
		if _, err := b.Start(ctx, pid, ch, wire.WebhookReplayRange{}); !errors.As(err, &we) || we.Code != wire.CodeReplayInProgress {
			t.Fatalf("a replay with a message still pending: %v", err)
		}
		time.Sleep(time.Until(lease)) // the dead replica's lease runs out (a time the test sets, not synchronisation)
		b.Wait()
		rcv.check(t)
		if n, _ := rcv.total(); n != 3 || rcv.count["msg_a"] != 1 || rcv.count["msg_b"] != 1 || rcv.count["msg_c"] != 1 {
			t.Fatalf("receiver saw %v, want each message once", rcv.count)
		}
		for _, corr := range []string{"cor_a", "cor_b", "cor_c"} {
			as := attempts(t, s, pid, corr)
			if len(as) != 2 || as[1].Kind != wire.AttemptReplay || as[1].WebhookID != webhookID(corr) {
				t.Fatalf("%s attempts: %+v", corr, as)
			}
		}
		if n, err := s.ReplayPending(ctx, pid); err != nil || n != 0 {
			t.Fatalf("pending after the replay: %d %v", n, err)
		}
	})
}
