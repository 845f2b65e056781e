// Package attemptlog hands the webhook channel's callback attempt records
// (docs/webhook-delivery.md "Attempt log") to the API, which
// keeps them in its database: the pod may be replaced, the log must not go
// with it.
//
// Record never blocks a delivery: records wait in a bounded queue and a
// background loop posts them in batches (POST
// /internal/projects/{id}/webhook/attempts, idempotent on the attempt id),
// at once when the queue was empty and with backoff while the API is
// unreachable. Close makes one last attempt to hand over what is queued.
// What a pod killed with -9 still held is lost (at most one batch window);
// the final state of every message never is: it is the API's outbox record.
package attemptlog

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/handover"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/settings"
	"github.com/svc-dev/svc/shared/wire"
)

// Poster hands records to the API (*internalapi.Client).
type Poster interface {
	PutWebhookAttempts(ctx context.Context, in wire.WebhookAttemptsPut) (wire.WebhookAttemptsPutResponse, error)
}

// Defaults.
const (
	DefaultCapacity = 10000
	DefaultBatch    = 200
	DefaultRetryMin = 200 * time.Millisecond
	DefaultRetryMax = handover.DefaultRetryMax
)

// Options configure New.
type Options struct {
	Poster Poster
	Log    *zap.Logger
	// Capacity bounds the queue; beyond it the oldest records are dropped
	// (logged, counted by Dropped).
	Capacity int
	// Batch is the most records per POST.
	Batch              int
	RetryMin, RetryMax time.Duration
}

// Recorder queues records and posts them. Safe for concurrent use.
type Recorder struct {
	o   Options
	log *zap.Logger

	mu      sync.Mutex
	queue   []wire.WebhookAttempt
	base    int64 // sequence number of queue[0]
	dropped int64
	posted  int64
	idle    *sync.Cond // signalled when the queue empties

	loop   *handover.Loop
	cancel context.CancelFunc
	done   chan struct{}
	closed sync.Once
}

// New starts a recorder; call Close to stop it.
func New(o Options) *Recorder {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	o.Capacity = settings.PositiveOr(o.Capacity, DefaultCapacity)
	o.Batch = min(settings.PositiveOr(o.Batch, DefaultBatch), 500)
	o.RetryMin = settings.PositiveOr(o.RetryMin, DefaultRetryMin)
	o.RetryMax = max(settings.PositiveOr(o.RetryMax, DefaultRetryMax), o.RetryMin)
	r := &Recorder{o: o, log: o.Log.Named("attemptlog"), done: make(chan struct{})}
	r.loop = handover.New(handover.Options{Drain: r.post, RetryMin: o.RetryMin, RetryMax: o.RetryMax,
		Pending: r.Pending, What: "attempt records", Log: r.log})
	r.idle = sync.NewCond(&r.mu)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go r.run(ctx)
	return r
}

// Record queues one attempt (callback.Recorder).
func (r *Recorder) Record(a wire.WebhookAttempt) {
	r.mu.Lock()
	r.queue = append(r.queue, a)
	if over := len(r.queue) - r.o.Capacity; over > 0 {
		r.dropped += int64(over)
		r.base += int64(over)
		r.queue = append([]wire.WebhookAttempt(nil), r.queue[over:]...)
		r.log.Warn("attempt log queue full; the oldest records were dropped", zap.Int("dropped", over))
	}
	r.mu.Unlock()
	r.loop.Wake()
}

// Pending is the number of records not handed over yet.
func (r *Recorder) Pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.queue)
}

// Posted is the number of records the API has taken.
func (r *Recorder) Posted() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.posted
}

// Dropped is the number of records dropped because the queue was full.
func (r *Recorder) Dropped() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dropped
}

// Flush waits until every queued record was handed over, or ctx ends.
func (r *Recorder) Flush(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		r.mu.Lock()
		r.idle.Broadcast()
		r.mu.Unlock()
	})
	defer stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.queue) > 0 && ctx.Err() == nil {
		r.idle.Wait()
	}
	return ctx.Err()
}

// Close stops the loop and makes one last attempt within ctx; what is
// left is logged and lost.
func (r *Recorder) Close(ctx context.Context) error {
	var err error
	r.closed.Do(func() {
		r.cancel()
		<-r.done
		err = r.post(ctx)
		if n := r.Pending(); n > 0 {
			r.log.Warn("attempt records not handed to the API are lost", zap.Int("pending", n), zap.Error(err))
		}
	})
	return err
}

func (r *Recorder) run(ctx context.Context) {
	defer close(r.done)
	r.loop.Run(ctx)
}

// post hands over the queue in batches, oldest first, and stops at the
// first failure. A batch the API refuses for good (internalapi.Permanent: a
// record it will never take) is dropped and logged rather than retried
// forever.
func (r *Recorder) post(ctx context.Context) error {
	for {
		r.mu.Lock()
		n := min(len(r.queue), r.o.Batch)
		batch := append([]wire.WebhookAttempt(nil), r.queue[:n]...)
		base := r.base
		r.mu.Unlock()
		if n == 0 {
			return nil
		}
		_, err := r.o.Poster.PutWebhookAttempts(ctx, wire.WebhookAttemptsPut{Attempts: batch})
		if internalapi.Permanent(err) {
			r.log.Error("the API refused attempt records for good; dropped", zap.Int("records", n), zap.Error(err))
			err = nil
		}
		if err != nil {
			return err
		}
		r.mu.Lock()
		// Records dropped for capacity meanwhile moved the queue's start.
		done := min(max(base+int64(n)-r.base, 0), int64(len(r.queue)))
		r.queue = r.queue[done:]
		r.base += done
		r.posted += int64(n)
		if len(r.queue) == 0 {
			r.queue = nil
			r.idle.Broadcast()
		}
		r.mu.Unlock()
	}
}
