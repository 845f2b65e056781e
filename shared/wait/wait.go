// Package wait holds every way the binaries wait (docs/design.md §5): the
// pause between attempts of a retry loop (the callback deliverer's backoff,
// spec 5.4; the upstream router's retry rounds; the pairing dialler), a
// background job on a fixed interval (the API server's janitor, parity
// check, LFS collector and idle-pod reaper), and the small idioms of done
// channels (closed to signal, nothing ever sent). Every wait ends as soon
// as its caller gives up. The name and the shape follow
// k8s.io/apimachinery's wait package.
package wait

import (
	"context"
	"sync"
	"time"
)

// For waits d and returns nil, or returns ctx.Err() as soon as ctx is done.
// A d of zero or less returns nil at once.
func For(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

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

// Group waits for wg until ctx ends, and returns ctx's error if it ended
// first (the goroutine that waits for wg then ends when wg is done).
func Group(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Ticks calls tick every interval (first after one interval) until done is
// closed or tick returns false.
func Ticks(done <-chan struct{}, interval time.Duration, tick func() bool) {
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

// Every calls job once per interval, the first time one interval from now,
// until ctx ends. A job that is running when ctx ends is not interrupted:
// Every returns after it.
func Every(ctx context.Context, interval time.Duration, job func(ctx context.Context)) {
	Ticks(ctx.Done(), interval, func() bool { job(ctx); return true })
}

// EveryFromNow is Every with one more call of job at once.
func EveryFromNow(ctx context.Context, interval time.Duration, job func(ctx context.Context)) {
	job(ctx)
	Every(ctx, interval, job)
}
