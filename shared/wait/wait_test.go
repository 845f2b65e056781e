package wait_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/wait"
)

func TestFor(t *testing.T) {
	t.Parallel()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		d    time.Duration
		want error
	}{
		{"elapses", context.Background(), time.Millisecond, nil},
		{"zero returns at once", cancelled, 0, nil},
		{"negative returns at once", cancelled, -time.Second, nil},
		{"a done context ends the wait", cancelled, time.Hour, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := wait.For(tc.ctx, tc.d); !errors.Is(err, tc.want) {
				t.Fatalf("For(%v) = %v, want %v", tc.d, err, tc.want)
			}
		})
	}
}

func TestEveryRunsUntilTheContextEnds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		every func(context.Context, time.Duration, func(context.Context))
		// first is whether the job runs before the first tick.
		first bool
	}{
		{"Every", wait.Every, false},
		{"EveryFromNow", wait.EveryFromNow, true},
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

func TestClosed(t *testing.T) {
	t.Parallel()
	done := make(chan struct{})
	if wait.Closed(done) {
		t.Fatal("an open channel reads as closed")
	}
	close(done)
	if !wait.Closed(done) {
		t.Fatal("a closed channel reads as open")
	}
}

// Ticks ticks until tick says stop, and returns at once when done closes.
func TestTicks(t *testing.T) {
	t.Parallel()
	n := 0
	wait.Ticks(make(chan struct{}), time.Millisecond, func() bool { n++; return n < 3 })
	if n != 3 {
		t.Fatalf("ticks = %d, want 3", n)
	}
	done := make(chan struct{})
	close(done)
	wait.Ticks(done, time.Hour, func() bool { t.Error("ticked after done"); return true })
}

// Group returns nil once the group is done, and ctx's error when ctx ends
// first.
func TestGroup(t *testing.T) {
	t.Parallel()
	var wg sync.WaitGroup
	release := make(chan struct{})
	wg.Go(func() { <-release })

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := wait.Group(ctx, &wg); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on a running group with an ended context = %v, want context.Canceled", err)
	}
	close(release)
	if err := wait.Group(context.Background(), &wg); err != nil {
		t.Fatalf("Wait on a finished group = %v, want nil", err)
	}
}
