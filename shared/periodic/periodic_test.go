package periodic_test

import (
	"context"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/periodic"
)

func TestEveryRunsUntilTheContextEnds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		every func(context.Context, time.Duration, func(context.Context))
		// first is whether the job runs before the first tick.
		first bool
	}{
		{"Every", periodic.Every, false},
		{"EveryFromNow", periodic.EveryFromNow, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			calls := make(chan time.Time, 100)
			start := time.Now()
			done := make(chan struct{})
			go func() {
				defer close(done)
				tc.every(ctx, 20*time.Millisecond, func(ctx context.Context) {
					if ctx.Err() != nil {
						return // a tick that raced the cancel
					}
					calls <- time.Now()
					if len(calls) == 3 {
						cancel()
					}
				})
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the loop did not end after its context")
			}
			if n := len(calls); n != 3 {
				t.Fatalf("job ran %d times, want 3", n)
			}
			if first := (<-calls).Sub(start); (first < 20*time.Millisecond) != tc.first {
				t.Errorf("first call after %v; want a call before the first tick: %v", first, tc.first)
			}
		})
	}
}
