// Package later holds the background work a request finds due but its
// answer does not need — a cache entry read again ahead of its expiry, a
// block of rate-limit permits leased ahead, a key's last-use write — until
// that answer has begun, so that it does not share the CPU with the
// request that found it on the way to its first byte (spec 4.1, the public
// API; docs/performance.md, "Background work after the answer").
//
// The public API's first middleware gives each request a Queue (With) and
// runs it when the handler returns (or once a stream's first events are
// flushed); Go queues work on the request's context, or starts it at once
// where the context carries no queue or its queue has run.
package later

import (
	"context"
	"sync"
)

// Queue is one request's held work.
type Queue struct {
	mu   sync.Mutex
	ran  bool
	work []job
}

type job struct {
	wg *sync.WaitGroup
	fn func()
}

type key struct{}

// With returns ctx carrying a new, empty queue.
func With(ctx context.Context) (context.Context, *Queue) {
	q := &Queue{}
	return context.WithValue(ctx, key{}, q), q
}

// Go starts fn on wg (wg.Go) once the queue ctx carries has run, or at once
// when ctx carries none or it has run already. wg is what a Close waits on.
func Go(ctx context.Context, wg *sync.WaitGroup, fn func()) {
	q, _ := ctx.Value(key{}).(*Queue)
	if q != nil {
		q.mu.Lock()
		if !q.ran {
			q.work = append(q.work, job{wg, fn})
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
	}
	wg.Go(fn)
}

// Run starts the queued work; later calls of Go start theirs at once. Run
// is idempotent and safe on a nil queue.
func (q *Queue) Run() {
	if q == nil {
		return
	}
	q.mu.Lock()
	work := q.work
	q.work, q.ran = nil, true
	q.mu.Unlock()
	for _, j := range work {
		j.wg.Go(j.fn)
	}
}

// Run runs the queue ctx carries, if any (Queue.Run).
func Run(ctx context.Context) {
	q, _ := ctx.Value(key{}).(*Queue)
	q.Run()
}
