package kubernetes

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// createGate admits runtime pod creations at a steady rate (a burst, then
// QPS per second) and holds at most maxQueued creations waiting for their
// turn. A creation that would wait longer than its budget, or find the queue
// full, is refused at once with the wait it would have had: the caller
// answers 503 with that Retry-After instead of a request that times out
// (a morning rush of first messages, docs/scale.md).
type createGate struct {
	lim       *rate.Limiter
	maxQueued int

	mu     sync.Mutex
	queued int
}

// errGateFull is a creation the gate refused; After is when to come back.
type errGateFull struct {
	After  time.Duration
	Queued int
}

func (e *errGateFull) Error() string {
	return fmt.Sprintf("%d runtime pods are already waiting to be created; retry in %s", e.Queued, e.After.Round(time.Second))
}

func newCreateGate(qps float64, burst, maxQueued int) *createGate {
	return &createGate{lim: rate.NewLimiter(rate.Limit(qps), max(burst, 1)), maxQueued: maxQueued}
}

// wait blocks until a creation may go ahead, at most budget; it refuses
// (errGateFull) when more would wait than maxQueued or the turn is later
// than budget, and ends early with ctx.
func (g *createGate) wait(ctx context.Context, budget time.Duration) error {
	g.mu.Lock()
	r := g.lim.Reserve()
	delay := r.Delay()
	if delay == 0 {
		g.mu.Unlock()
		return nil
	}
	if n := g.queued; n >= g.maxQueued || delay > budget {
		r.Cancel()
		g.mu.Unlock()
		return &errGateFull{After: max(delay, g.drainTime(n)), Queued: n}
	}
	g.queued++
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.queued--
		g.mu.Unlock()
	}()
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		r.Cancel()
		return ctx.Err()
	}
}

// Queued is how many creations wait for their turn now.
func (g *createGate) Queued() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.queued
}

// drainTime is how long n queued creations take at the gate's rate.
func (g *createGate) drainTime(n int) time.Duration {
	qps := float64(g.lim.Limit())
	if qps <= 0 {
		return time.Minute
	}
	return max(time.Duration(float64(n)/qps*float64(time.Second)), time.Second)
}
