// Package attemptlog hands the webhook channel's callback attempt records
// (docs/webhook-delivery.md "Attempt log") to the API, which
// keeps them in its database: the pod may be replaced, the log must not go
// with it.
//
// Records are the attempts kind of the pod's one hand-over queue (package
// handover): Record writes the record to the journal (one fsynced
// transaction, no network) and wakes the queue's loop, which posts them in
// batches (POST /internal/projects/{id}/webhook/attempts, idempotent on the
// attempt id) at once, and with backoff while the API is unreachable. The
// log survives a restart of the pod, a kill -9 included: what the API had
// not taken is posted by the next run, exactly once per attempt id. Close
// makes one last attempt to hand over what is queued; the rest stays in the
// journal.
package attemptlog

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/handover"
	"github.com/svc-dev/svc/podagent/internal/journal"
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
	// Queue is the pod's hand-over queue. When nil, the recorder runs a
	// queue of its own on Journal (required then), closed by Close, with
	// RetryMin and RetryMax as its backoff.
	Queue   *handover.Queue
	Journal *journal.DB
	// Capacity bounds the records waiting; beyond it the oldest are
	// dropped (logged, counted by Dropped).
	Capacity int
	// Batch is the most records per POST.
	Batch              int
	RetryMin, RetryMax time.Duration
}

// Recorder queues records and posts them. Safe for concurrent use.
type Recorder struct {
	o     Options
	log   *zap.Logger
	q     *handover.Queue
	owned bool // q is the recorder's own

	mu      sync.Mutex
	dropped int64
	posted  int64
	closed  sync.Once
}

// New registers the attempts kind of the queue (records an earlier run
// left in the journal are posted by it); call Close to stop.
func New(o Options) (*Recorder, error) {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	o.Capacity = settings.PositiveOr(o.Capacity, DefaultCapacity)
	o.Batch = min(settings.PositiveOr(o.Batch, DefaultBatch), 500)
	o.RetryMin = settings.PositiveOr(o.RetryMin, DefaultRetryMin)
	o.RetryMax = max(settings.PositiveOr(o.RetryMax, DefaultRetryMax), o.RetryMin)
	r := &Recorder{o: o, log: o.Log.Named("attemptlog"), q: o.Queue}
	if r.q == nil {
		if o.Journal == nil {
			return nil, errors.New("attemptlog: Options needs a Queue or a Journal")
		}
		q, err := handover.OpenQueue(o.Journal, handover.QueueOptions{RetryMin: o.RetryMin, RetryMax: o.RetryMax, Log: o.Log})
		if err != nil {
			return nil, err
		}
		r.q, r.owned = q, true
	}
	r.q.Handle(handover.Attempts, handover.Handler{What: "attempt records", Batch: o.Batch, Send: r.post})
	if r.owned {
		r.q.Start()
	}
	return r, nil
}

// Record queues one attempt (callback.Recorder): in the journal before it
// returns, handed over by the queue's loop.
func (r *Recorder) Record(a wire.WebhookAttempt) {
	_ = r.q.Put(handover.Attempts, a.ID, a, false) // a failed write is logged; the record goes from memory
	if over := r.q.DropOldest(handover.Attempts, r.o.Capacity); over > 0 {
		r.mu.Lock()
		r.dropped += int64(over)
		r.mu.Unlock()
		r.log.Warn("attempt log queue full; the oldest records were dropped", zap.Int("dropped", over))
	}
}

// Pending is the number of records not handed over yet.
func (r *Recorder) Pending() int { return r.q.Len(handover.Attempts) }

// Posted is the number of records the API has taken (or refused for good).
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
func (r *Recorder) Flush(ctx context.Context) error { return r.q.Idle(ctx, handover.Attempts) }

// Close makes one last attempt within ctx to hand the records over; what
// is left stays in the journal for the next start.
func (r *Recorder) Close(ctx context.Context) error {
	var err error
	r.closed.Do(func() {
		if r.owned {
			err = r.q.Close(ctx)
			return
		}
		err = r.q.Drain(ctx, handover.Attempts)
		if n := r.Pending(); n > 0 {
			r.log.Warn("attempt records not handed to the API yet stay in the journal for the next start",
				zap.Int("pending", n), zap.Error(err))
		}
	})
	return err
}

// post hands one batch over, oldest first (the queue's handler). A batch
// the API refuses for good (internalapi.Permanent: a record it will never
// take) is set aside by the queue and logged rather than retried forever.
func (r *Recorder) post(ctx context.Context, batch []handover.Entry) error {
	recs := make([]wire.WebhookAttempt, 0, len(batch))
	for _, e := range batch {
		var a wire.WebhookAttempt
		if err := json.Unmarshal(e.Payload, &a); err != nil {
			r.log.Error("unreadable attempt record in the journal; dropped", zap.String("id", e.ID), zap.Error(err))
			continue
		}
		recs = append(recs, a)
	}
	var err error
	if len(recs) > 0 {
		_, err = r.o.Poster.PutWebhookAttempts(ctx, wire.WebhookAttemptsPut{Attempts: recs})
	}
	if err == nil || internalapi.Permanent(err) {
		r.mu.Lock()
		r.posted += int64(len(recs))
		r.mu.Unlock()
	}
	return err
}
