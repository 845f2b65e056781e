package chans_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/chans"
)

func TestClosed(t *testing.T) {
	t.Parallel()
	done := make(chan struct{})
	if chans.Closed(done) {
		t.Fatal("an open channel reads as closed")
	}
	close(done)
	if !chans.Closed(done) {
		t.Fatal("a closed channel reads as open")
	}
}

// Every ticks until tick says stop, and returns at once when done closes.
func TestEvery(t *testing.T) {
	t.Parallel()
	n := 0
	chans.Every(make(chan struct{}), time.Millisecond, func() bool { n++; return n < 3 })
	if n != 3 {
		t.Fatalf("ticks = %d, want 3", n)
	}
	done := make(chan struct{})
	close(done)
	chans.Every(done, time.Hour, func() bool { t.Error("ticked after done"); return true })
}

// Wait returns nil once the group is done, and ctx's error when ctx ends
// first.
func TestWait(t *testing.T) {
	t.Parallel()
	var wg sync.WaitGroup
	release := make(chan struct{})
	wg.Go(func() { <-release })

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := chans.Wait(ctx, &wg); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on a running group with an ended context = %v, want context.Canceled", err)
	}
	close(release)
	if err := chans.Wait(context.Background(), &wg); err != nil {
		t.Fatalf("Wait on a finished group = %v, want nil", err)
	}
}
