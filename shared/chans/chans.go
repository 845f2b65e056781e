// Package chans holds the small idioms of done channels (closed to signal,
// nothing ever sent) the binaries share: asking whether one is closed yet,
// waiting for a WaitGroup until a context ends, and a ticker loop that a
// done channel ends.
package chans

import (
	"context"
	"sync"
	"time"
)

// Closed reports, without blocking, whether ch is closed (or holds a value):
// the check of a done channel that a process, a VM or a connection closes
// when it ends.
func Closed[T any](ch <-chan T) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Wait waits for wg until ctx ends, and returns ctx's error if it ended
// first (the goroutine that waits for wg then ends when wg is done).
func Wait(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Every calls tick every interval (first after one interval) until done is
// closed or tick returns false.
func Every(done <-chan struct{}, interval time.Duration, tick func() bool) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		if !tick() {
			return
		}
	}
}
