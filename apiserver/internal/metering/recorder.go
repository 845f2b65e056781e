package metering

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/store"
)

// Recorder writes usage records off the request path: answered requests are
// queued and written in batches (one transaction per batch), so a client on
// a kept-alive connection never waits for metering. A full queue makes the
// caller wait instead of dropping a record; Close writes what is queued.
// A batch the database refuses is retried with backoff for RetryFor (a
// database outage), then logged and dropped. What a crash of the process can
// lose is the batch not yet written (at most FlushInterval of usage, or what
// queued during an outage); see README, "Metering".
type Recorder struct {
	store *store.Store
	log   *zap.Logger
	now   func() time.Time
	queue chan pending
	done  chan struct{}
	once  sync.Once
	// windows, when set, is the Meter's window cache: each write adds its
	// credits to it as it commits (windows.go).
	windows *windowCache
}

type pending struct {
	rec     store.UsageRecord
	windows []store.WindowSpec
}

const (
	// FlushInterval bounds how long a record waits in the queue.
	FlushInterval = 20 * time.Millisecond
	maxBatch      = 512
	queueSize     = 8192
	// RetryFor bounds how long a batch is retried while the database
	// refuses it; backoff grows by 200 ms per attempt up to 5 s.
	RetryFor = 2 * time.Minute
)

// NewRecorder starts the background writer.
func NewRecorder(st *store.Store, log *zap.Logger) *Recorder {
	r := &Recorder{store: st, log: log, now: time.Now, queue: make(chan pending, queueSize), done: make(chan struct{})}
	go r.loop()
	return r
}

// Enqueue hands one record to the writer.
func (r *Recorder) Enqueue(rec store.UsageRecord, windows []store.WindowSpec) {
	r.queue <- pending{rec: rec, windows: windows}
}

// Close stops accepting records and waits until every queued one is written
// or ctx ends.
func (r *Recorder) Close(ctx context.Context) error {
	r.once.Do(func() { close(r.queue) })
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Recorder) loop() {
	defer close(r.done)
	batch := make([]pending, 0, maxBatch)
	for {
		p, ok := <-r.queue
		if !ok {
			return
		}
		batch = append(batch[:0], p)
		timer := time.NewTimer(FlushInterval)
	fill:
		for len(batch) < maxBatch {
			select {
			case p, ok := <-r.queue:
				if !ok {
					break fill
				}
				batch = append(batch, p)
			case <-timer.C:
				break fill
			}
		}
		timer.Stop()
		r.write(batch)
	}
}

func (r *Recorder) write(batch []pending) {
	recs := make([]store.UsageRecord, len(batch))
	wins := make([][]store.WindowSpec, len(batch))
	ids := make([]string, len(batch))
	for i, p := range batch {
		recs[i], wins[i], ids[i] = p.rec, p.windows, p.rec.WorkspaceID
	}
	credits := windowCredits(recs, wins)
	giveUp := r.now().Add(RetryFor)
	for attempt := 1; ; attempt++ {
		var gen uint64
		if r.windows != nil {
			gen = r.windows.beginWrite()
		}
		now := r.now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := r.store.RecordUsageBatch(ctx, recs, wins, now)
		cancel()
		if err == nil {
			if r.windows != nil {
				r.windows.written(credits, now.UnixMilli(), gen)
			}
			return
		}
		if r.windows != nil {
			r.windows.failed(ids...)
		}
		r.log.Error("writing usage records failed", zap.Int("records", len(recs)), zap.Int("attempt", attempt), zap.Error(err))
		if r.now().After(giveUp) {
			r.log.Error("usage records dropped after retries", zap.Int("records", len(recs)), zap.Duration("retried_for", RetryFor))
			return
		}
		time.Sleep(min(time.Duration(attempt)*200*time.Millisecond, 5*time.Second)) // database outage backoff
	}
}
