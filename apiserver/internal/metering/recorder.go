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
// a kept-alive connection never waits for metering. A batch the database
// refuses is spooled (spool.go: memory, then a file under the data
// directory) and written, exactly once, when the database answers again;
// meanwhile new batches join the spool and requests go on. Close writes
// what is queued and spooled, or leaves it in the spool file for the next
// start. Without a spool directory a full memory spool makes the caller
// wait instead of dropping a record.
type Recorder struct {
	store *store.Store
	log   *zap.Logger
	now   func() time.Time
	queue chan pending
	done  chan struct{}
	once  sync.Once
	spool *spool
	// retryEvery is the first wait before a spooled batch is tried again
	// (doubling up to MaxRetryWait).
	retryEvery time.Duration
	// windows, when set, is the Meter's window cache: each write adds its
	// credits to it as it commits (windows.go).
	windows *windowCache
	// outage, when set, is the Meter's state for admission without the
	// database: each write adds its credits to the known windows.
	outage *outage

	mu       sync.Mutex
	spooled  int // records in the spool (for Spooled)
	unsynced map[string]map[string]int64
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
	// MaxRetryWait caps the wait between attempts to write the spool.
	MaxRetryWait = 5 * time.Second
	// closeRetries is how often Close tries the database before leaving
	// the spool in its file.
	closeRetries = 3
)

// RecorderOptions tune a Recorder; zero fields take the defaults.
type RecorderOptions struct {
	// SpoolDir holds the spool file ("": memory only).
	SpoolDir string
	// SpoolMemory: records spooled in memory before the file (SpoolMemory).
	SpoolMemory int
	// RetryEvery: the first wait before the spool is tried again (200 ms).
	RetryEvery time.Duration
}

// NewRecorder starts the background writer.
func NewRecorder(st *store.Store, log *zap.Logger, o RecorderOptions) *Recorder {
	sp := newSpool(o.SpoolDir)
	if o.SpoolMemory > 0 {
		sp.memMax = o.SpoolMemory
	}
	if o.RetryEvery <= 0 {
		o.RetryEvery = 200 * time.Millisecond
	}
	r := &Recorder{store: st, log: log, now: time.Now, queue: make(chan pending, queueSize), done: make(chan struct{}),
		spool: sp, retryEvery: o.RetryEvery, unsynced: map[string]map[string]int64{}}
	go r.loop()
	return r
}

// Enqueue hands one record to the writer.
func (r *Recorder) Enqueue(rec store.UsageRecord, windows []store.WindowSpec) {
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = r.now().UTC()
	}
	// Its idempotency key is the request id and this time, as the database
	// keeps it (microseconds).
	rec.CreatedAt = rec.CreatedAt.Truncate(time.Microsecond)
	r.mu.Lock()
	byName := r.unsynced[rec.WorkspaceID]
	if byName == nil {
		byName = map[string]int64{}
		r.unsynced[rec.WorkspaceID] = byName
	}
	for _, w := range windows {
		byName[w.Name] += rec.CreditsMicro
	}
	r.mu.Unlock()
	r.queue <- pending{rec: rec, windows: windows}
}

// Unsynced is what this replica recorded for a workspace that is not
// written yet (queued or spooled), per window name: the local spend
// admission adds to the last known windows while the database is down.
func (r *Recorder) Unsynced(workspaceID string) map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int64, len(r.unsynced[workspaceID]))
	for k, v := range r.unsynced[workspaceID] {
		out[k] = v
	}
	return out
}

// Spooled is the number of records waiting in the spool.
func (r *Recorder) Spooled() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.spooled
}

// Close stops accepting records and waits until every queued one is written
// (or left in the spool file) or ctx ends.
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
	wait := r.retryEvery
	var retry *time.Timer
	var retryC <-chan time.Time
	r.setSpooled()
	if r.spool.len() > 0 { // a spool file left by an earlier run
		retry = time.NewTimer(0)
		retryC = retry.C
	}
	for {
		select {
		case p, ok := <-r.queue:
			if !ok {
				r.closing()
				return
			}
			batch = r.fill(append(batch[:0], p))
			if r.spool.len() == 0 && r.writeNew(batch) == nil {
				continue
			}
			for r.spool.full() { // memory only and full: wait for the database
				r.drain()
				if r.spool.full() {
					time.Sleep(wait) // outage backoff; the queue fills and Enqueue waits
					wait = min(2*wait, MaxRetryWait)
				}
			}
			if err := r.spool.push(batch); err != nil {
				r.log.Error("usage spool: appending to the file failed; retrying the batch in memory", zap.Error(err))
				r.spool.mem = append(r.spool.mem, append([]pending(nil), batch...))
				r.spool.memRecs += len(batch)
			}
			r.setSpooled()
			if retryC == nil {
				retry = time.NewTimer(wait)
				retryC = retry.C
			}
		case <-retryC:
			if r.drain() {
				wait, retryC = r.retryEvery, nil
				continue
			}
			wait = min(2*wait, MaxRetryWait)
			retry.Reset(wait)
		}
	}
}

// fill adds what arrives within FlushInterval, up to maxBatch.
func (r *Recorder) fill(batch []pending) []pending {
	timer := time.NewTimer(FlushInterval)
	defer timer.Stop()
	for len(batch) < maxBatch {
		select {
		case p, ok := <-r.queue:
			if !ok {
				return batch
			}
			batch = append(batch, p)
		case <-timer.C:
			return batch
		}
	}
	return batch
}

// drain writes the spool; true when it is empty.
func (r *Recorder) drain() bool {
	n := r.spool.len()
	err := r.spool.drain(r.write)
	r.setSpooled()
	if err != nil {
		r.log.Warn("usage spool not written yet", zap.Int("records", r.spool.len()), zap.Error(err))
		return false
	}
	if n > 0 {
		r.log.Info("usage spool written", zap.Int("records", n))
	}
	return true
}

// closing writes what is spooled, a few times; what is left goes to the
// spool file for the next start.
func (r *Recorder) closing() {
	wait := r.retryEvery
	for i := 0; i < closeRetries && r.spool.len() > 0; i++ {
		if r.drain() {
			return
		}
		time.Sleep(wait) // outage backoff at shutdown
		wait = min(2*wait, MaxRetryWait)
	}
	if r.spool.len() == 0 {
		return
	}
	if err := r.spool.spill(); err != nil {
		r.log.Error("usage records not written: the database is down and the spool file failed",
			zap.Int("records", r.spool.len()), zap.Error(err))
		return
	}
	r.log.Warn("usage records left in the spool file for the next start", zap.String("file", r.spool.path()),
		zap.Int("records", r.spool.len()))
}

func (r *Recorder) setSpooled() {
	n := r.spool.memRecs + max(r.spool.fileRecs, 0)
	r.mu.Lock()
	r.spooled = n
	r.mu.Unlock()
}

// write writes one batch, once; nil when it is committed.
func (r *Recorder) write(batch []pending) error { return r.writeBatch(batch, true) }

// writeNew is write for a batch taken from the queue and not tried before:
// the store skips its check for records already written (a failed attempt
// sends the batch to the spool, whose writes check).
func (r *Recorder) writeNew(batch []pending) error { return r.writeBatch(batch, false) }

func (r *Recorder) writeBatch(batch []pending, retried bool) error {
	recs := make([]store.UsageRecord, len(batch))
	wins := make([][]store.WindowSpec, len(batch))
	ids := make([]string, len(batch))
	for i, p := range batch {
		recs[i], wins[i], ids[i] = p.rec, p.windows, p.rec.WorkspaceID
	}
	credits := windowCredits(recs, wins)
	var gen uint64
	if r.windows != nil {
		gen = r.windows.beginWrite()
	}
	now := r.now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	record := r.store.RecordNewUsageBatch
	if retried {
		record = r.store.RecordUsageBatch
	}
	err := record(ctx, recs, wins, now)
	cancel()
	if err != nil {
		if r.windows != nil {
			r.windows.failed(ids...)
		}
		r.log.Warn("writing usage records failed; spooled", zap.Int("records", len(recs)), zap.Error(err))
		return err
	}
	if r.windows != nil {
		r.windows.written(credits, now.UnixMilli(), gen)
	}
	if r.outage != nil {
		r.outage.wrote(credits, now.UnixMilli())
	}
	r.mu.Lock()
	for ws, byName := range credits {
		u := r.unsynced[ws]
		if u == nil {
			continue // records spooled by an earlier run
		}
		for name, c := range byName {
			if u[name] -= c; u[name] <= 0 {
				delete(u, name)
			}
		}
		if len(u) == 0 {
			delete(r.unsynced, ws)
		}
	}
	r.mu.Unlock()
	return nil
}
