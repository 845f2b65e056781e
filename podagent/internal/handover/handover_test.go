package handover_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/podagent/internal/handover"
)

// A Loop drains at start and on each Wake; a failed drain is retried after
// a backoff step that grows up to the cap, and a success resets it.
func TestLoopRetriesWithBackoffAndWakes(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var at []time.Time
	fails := 3
	drained := make(chan int, 16)
	l := handover.New(handover.Options{RetryMin: 20 * time.Millisecond, RetryMax: 40 * time.Millisecond, What: "items",
		Drain: func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			at = append(at, time.Now())
			drained <- len(at)
			if len(at) <= fails {
				return errors.New("API down")
			}
			return nil
		}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	for n := range drained {
		if n == fails+1 {
			break
		}
	}
	l.Wake()
	if n := <-drained; n != fails+2 {
		t.Fatalf("drain %d after the wake", n)
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i <= fails; i++ {
		gap := at[i].Sub(at[i-1])
		// 20 ms, 40 ms, 40 ms (capped), each ±20 %.
		if gap < 16*time.Millisecond {
			t.Fatalf("retry %d after %s: want a backoff step of at least 16ms", i, gap)
		}
	}
}

// Run returns when its context ends, also while waiting for a backoff.
func TestLoopStopsWithItsContext(t *testing.T) {
	t.Parallel()
	l := handover.New(handover.Options{RetryMin: time.Hour, Drain: func(context.Context) error { return errors.New("down") }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}
