package webhookqueue_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/apiserver/internal/webhookqueue"
	"github.com/svc-dev/svc/shared/wire"
)

func TestScheduleParseAndJitter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in    string
		total time.Duration
		ok    bool
	}{
		{webhookqueue.DefaultSchedule, 5*time.Second + 5*time.Minute + 30*time.Minute + 2*time.Hour + 5*time.Hour + 20*time.Hour + 42*time.Hour, true},
		{"1s, 2s", 3 * time.Second, true},
		{"", 0, false},
		{"1s,-2s", 0, false},
		{"1s,soon", 0, false},
	} {
		s, err := webhookqueue.ParseSchedule(tc.in)
		if (err == nil) != tc.ok || (tc.ok && s.Total() != tc.total) {
			t.Errorf("ParseSchedule(%q) = %v (total %v), %v", tc.in, s, s.Total(), err)
		}
	}
	s := webhookqueue.MustSchedule("10h")
	for range 200 {
		d, ok := s.Delay(0)
		if !ok || d < 8*time.Hour || d > 12*time.Hour {
			t.Fatalf("Delay(0) = %v, %v; want 10h ±20 %%", d, ok)
		}
	}
	if _, ok := s.Delay(1); ok {
		t.Fatal("a delay past the schedule")
	}
}

// A 429 with Retry-After that asks for longer than the step is honoured
// (capped at 10 minutes), and lowers the endpoint's throttle.
func TestRetryAfterIsHonouredAndCapped(t *testing.T) {
	t.Parallel()
	s := storetest.SQLite(t)
	ctx := context.Background()
	pid, chID := channel(t, s, "ra")
	for _, tc := range []struct {
		corr, retryAfter string
		want             time.Duration
	}{{"cor_ra120", "120", 120 * time.Second}, {"cor_ra3600", "3600", 10 * time.Minute}} {
		rcv := newReceiver(t, func(string, int) int { return http.StatusTooManyRequests })
		rcv.srv.Config.Handler = retryAfter(tc.retryAfter, rcv.srv.Config.Handler)
		handOver(t, s, pid, chID, tc.corr, rcv.srv.URL+"/hook", 429)
		q := newQueue(s, &clock{off: time.Second}, "1ms,1ms", "a", true, webhookqueue.Options{})
		if n := q.Tick(ctx); n != 1 {
			t.Fatalf("tick handled %d", n)
		}
		as := attempts(t, s, pid, tc.corr)
		last := as[len(as)-1]
		if last.Outcome != wire.AttemptRetrying || last.StatusCode != 429 || last.NextRetryAt == nil {
			t.Fatalf("attempt %+v", last)
		}
		if got := last.NextRetryAt.Sub(last.AttemptedAt); got < tc.want-time.Second || got > tc.want+time.Second {
			t.Errorf("%s: next retry in %v, want %v", tc.corr, got, tc.want)
		}
		if m := outboxRow(t, s, pid, tc.corr); m.NextAttemptAt == nil || !m.NextAttemptAt.Equal(*last.NextRetryAt) {
			t.Errorf("%s: row's next attempt %v, log says %v", tc.corr, m.NextAttemptAt, last.NextRetryAt)
		}
	}
}

func retryAfter(v string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", v)
		h.ServeHTTP(w, r)
	})
}
