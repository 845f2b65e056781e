package later

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
)

// Work on a request's context waits for its queue to run; work on any
// other context, or after the run, starts at once.
func TestGo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		queue    bool // the context carries a queue
		runFirst bool // the queue ran before Go
		wantHeld bool // nothing started before Run
	}{
		{name: "no queue", queue: false, wantHeld: false},
		{name: "queue not yet run", queue: true, wantHeld: true},
		{name: "queue already run", queue: true, runFirst: true, wantHeld: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			var q *Queue
			if tc.queue {
				ctx, q = With(ctx)
			}
			if tc.runFirst {
				q.Run()
			}
			var wg sync.WaitGroup
			var ran atomic.Int32
			Go(ctx, &wg, func() { ran.Add(1) })
			Go(ctx, &wg, func() { ran.Add(1) })
			wg.Wait() // returns at once when the work is held: nothing was added yet
			if held := ran.Load() == 0; held != tc.wantHeld {
				t.Fatalf("before Run: %d of 2 ran, want held=%v", ran.Load(), tc.wantHeld)
			}
			Run(ctx)
			Run(ctx) // idempotent: nothing starts twice
			wg.Wait()
			if got := ran.Load(); got != 2 {
				t.Fatalf("after Run: %d ran, want 2", got)
			}
		})
	}
}

// Run on a context without a queue, or on a nil queue, does nothing.
func TestRunWithoutQueue(t *testing.T) {
	t.Parallel()
	Run(context.Background())
	var q *Queue
	q.Run()
}
