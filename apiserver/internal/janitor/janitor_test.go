package janitor_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/apiserver/internal/janitor"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/shared/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// A sweep removes counters of minutes that are over and outbox messages
// delivered before the retention, and keeps everything still in use.
func TestSweep(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		now := time.Date(2026, 3, 1, 12, 30, 20, 0, time.UTC)
		minute := now.Truncate(time.Minute)
		for _, w := range []time.Time{minute.Add(-5 * time.Minute), minute.Add(-time.Minute), minute} {
			if _, err := s.IncrRateCounters(ctx, w.UnixMilli(), "key:a"); err != nil {
				t.Fatal(err)
			}
		}
		p := storetest.Projects(t, s, "p")[0]
		ch, err := s.SetChannel(ctx, p.ID, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"old", "recent", "pending"} {
			if _, _, err := s.PutOutbox(ctx, store.OutboxMessage{ProjectID: p.ID, ChannelID: ch.ID, CorrelationID: id,
				Reply: "r", Metadata: "{}", CreatedAt: now}); err != nil {
				t.Fatal(err)
			}
		}
		took, err := s.TakeOutbox(ctx, p.ID, ch.ID, 2) // delivers "old" and "recent"
		if err != nil || len(took) != 2 {
			t.Fatalf("take: %v %v", took, err)
		}
		// Age the first delivery past the retention.
		old := now.Add(-janitor.OutboxRetention - time.Hour)
		if _, err := s.DB().ExecContext(ctx, rebind(s, "UPDATE webhook_outbox SET delivered_at = ? WHERE correlation_id = ?"), old, took[0].CorrelationID); err != nil {
			t.Fatal(err)
		}

		j := &janitor.Janitor{Store: s, Log: zaptest.NewLogger(t), Now: func() time.Time { return now }}
		if err := j.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		var counters, messages int
		s.DB().QueryRowContext(ctx, "SELECT count(*) FROM rate_counters").Scan(&counters)
		s.DB().QueryRowContext(ctx, "SELECT count(*) FROM webhook_outbox").Scan(&messages)
		if counters != 2 {
			t.Errorf("rate counters left: %d, want the current and the previous minute", counters)
		}
		if messages != 2 {
			t.Errorf("outbox rows left: %d, want the recent delivery and the pending one", messages)
		}
	})
}

func rebind(s *store.Store, q string) string {
	if s.Dialect() != "postgres" {
		return q
	}
	out, n := []byte{}, 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			out = append(out, []byte("$"+string(rune('0'+n)))...)
			continue
		}
		out = append(out, q[i])
	}
	return string(out)
}

// A sweep removes webhook attempts older than the retention and forgets a
// replaced secret whose overlap ended; recent attempts and a current
// overlap stay.
func TestSweepAttemptsAndReplacedSecrets(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		now := time.Now().UTC()
		ps := storetest.Projects(t, s, "ended", "lasting")
		sec := "first"
		for i, p := range ps {
			ch, err := s.SetChannel(ctx, p.ID, &sec, nil)
			if err != nil {
				t.Fatal(err)
			}
			overlap := time.Hour
			if i == 0 {
				overlap = time.Millisecond
			}
			if _, err := s.RotateChannelSecret(ctx, p.ID, "second", overlap); err != nil {
				t.Fatal(err)
			}
			var rows []store.WebhookAttempt
			for j, age := range []time.Duration{48 * time.Hour, time.Hour} {
				rows = append(rows, store.WebhookAttempt{ID: store.NewID("att"), ProjectID: p.ID, ChannelID: ch.ID, CorrelationID: "c",
					WebhookID: "msg_c", Kind: "delivery", Attempt: j + 1, URL: "https://h.example/", Endpoint: "https://h.example/",
					AttemptedAt: now.Add(-age), StatusCode: 200, Outcome: "delivered"})
			}
			if _, _, err := s.RecordWebhookAttempts(ctx, rows, time.Hour, now); err != nil {
				t.Fatal(err)
			}
		}
		j := &janitor.Janitor{Store: s, Log: zaptest.NewLogger(t), Now: func() time.Time { return now.Add(time.Second) },
			AttemptRetention: 24 * time.Hour}
		if err := j.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		var attempts int
		s.DB().QueryRowContext(ctx, "SELECT count(*) FROM webhook_attempts").Scan(&attempts)
		if attempts != 2 {
			t.Errorf("attempts left: %d, want the two recent ones", attempts)
		}
		ended, _ := s.GetChannel(ctx, ps[0].ID)
		lasting, _ := s.GetChannel(ctx, ps[1].ID)
		if ended.PreviousSecret != "" || lasting.PreviousSecret != "first" {
			t.Errorf("previous secrets after the sweep: %q (overlap ended) and %q (overlap lasting)", ended.PreviousSecret, lasting.PreviousSecret)
		}
	})
}
