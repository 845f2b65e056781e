package kubernetes

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The creation gate lets a burst through at once, refuses what would wait
// longer than its budget or find the queue full (with the wait as the
// Retry-After), and lets a queued creation through at its turn.
func TestCreateGate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		qps        float64
		burst, max int
		budget     time.Duration
		calls      int
		admitted   int
		minAfter   time.Duration
	}{
		{name: "a burst goes through", qps: 1, burst: 5, max: 10, budget: 0, calls: 5, admitted: 5},
		{name: "beyond the burst, past the budget", qps: 0.01, burst: 2, max: 10, budget: time.Second, calls: 4, admitted: 2, minAfter: 50 * time.Second},
		{name: "no queue: refused with the drain time", qps: 0.5, burst: 1, max: 0, budget: time.Hour, calls: 3, admitted: 1, minAfter: time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newCreateGate(tc.qps, tc.burst, tc.max)
			admitted := 0
			for range tc.calls {
				err := g.wait(context.Background(), tc.budget)
				var full *errGateFull
				switch {
				case err == nil:
					admitted++
				case errors.As(err, &full):
					if full.After < tc.minAfter {
						t.Errorf("Retry-After %s, want at least %s", full.After, tc.minAfter)
					}
				default:
					t.Fatalf("wait: %v", err)
				}
			}
			if admitted != tc.admitted {
				t.Fatalf("%d admitted, want %d", admitted, tc.admitted)
			}
		})
	}
}

// A creation that waits for its turn is counted as queued and goes through
// when the turn comes; a cancelled wait leaves the queue.
func TestCreateGateQueues(t *testing.T) {
	t.Parallel()
	g := newCreateGate(20, 1, 10) // a turn every 50 ms
	if err := g.wait(context.Background(), time.Second); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.wait(context.Background(), time.Second) }()
	if err := <-done; err != nil {
		t.Fatalf("queued creation: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	g2 := newCreateGate(0.001, 1, 10)
	_ = g2.wait(context.Background(), time.Hour)
	if err := g2.wait(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
	if n := g2.Queued(); n != 0 {
		t.Fatalf("%d still queued after the wait ended", n)
	}
}
