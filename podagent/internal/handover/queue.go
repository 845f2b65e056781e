package handover

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/journal"
	"github.com/svc-dev/svc/shared/internalapi"
)

// Kind is one kind of hand-over: its entries reach the API through one
// wire call of the typed client (shared/internalapi), in the order they
// were queued.
type Kind string

// The kinds of hand-over.
const (
	// Outbox: a reply the pod could not deliver (PutOutbox), by
	// correlationId.
	Outbox Kind = "outbox"
	// Attempts: a callback attempt record (PutWebhookAttempts, in
	// batches), by attempt id.
	Attempts Kind = "attempts"
	// Checkpoint: a commit's checkpoint record (RecordCheckpoint), by
	// commit sha; held until a persist made the commit durable.
	Checkpoint Kind = "checkpoint"
)

// Entry is one hand-over, as the journal keeps it (the handover table).
type Entry struct {
	Kind Kind `json:"kind"`
	// ID is what the API is idempotent on (correlationId, attempt id,
	// commit sha); one entry per kind and id.
	ID string `json:"id"`
	// Held entries are not handed over until Release (a commit not
	// persisted yet).
	Held bool `json:"held,omitempty"`
	// Attempts counts the failed hand-overs.
	Attempts int             `json:"attempts,omitempty"`
	Payload  json.RawMessage `json:"payload"`
}

// Handler hands one kind's entries to the API.
type Handler struct {
	// Send hands a batch over, oldest first; nil: the API took every
	// entry of it. An error internalapi.Permanent says is the API's
	// refusal for good: the batch is set aside (logged), the rest goes
	// on; any other error is retried after a backoff step, and the kind's
	// later entries wait behind it.
	Send func(ctx context.Context, batch []Entry) error
	// Batch is the most entries per Send (0: 1).
	Batch int
	// Paused, when set, stops the kind's hand-overs while it says so (a
	// fenced pod records no checkpoint).
	Paused func() bool
	// What names an entry in logs ("outbox message").
	What string
}

// QueueOptions configure OpenQueue.
type QueueOptions struct {
	// RetryMin is the first backoff step, RetryMax its cap (0: the
	// Loop's defaults).
	RetryMin, RetryMax time.Duration
	Log                *zap.Logger
}

// Queue is the pod's one hand-over queue: every entry is in the journal's
// handover table (fsynced before Put returns) until the API took it, and
// one Loop drains every kind. Safe for concurrent use.
type Queue struct {
	table journal.Table[Entry]
	db    *journal.DB
	log   *zap.Logger
	loop  *Loop

	mu       sync.Mutex
	items    []*item // in queue order
	byID     map[Kind]map[string]*item
	next     uint64 // the next sequence key
	handlers map[Kind]Handler
	onChange map[Kind]func(n int)
	removed  chan struct{} // closed and replaced when entries leave

	drainMu map[Kind]*sync.Mutex // one drain per kind at a time (under mu)
	run     sync.Once
	cancel  context.CancelFunc
	done    chan struct{}
	closed  sync.Once
}

type item struct {
	key       string
	e         Entry
	journaled bool // false: the journal write failed, memory only
	writing   bool // its journal write (Put) has not ended: not handed over yet
}

// OpenQueue loads the entries an earlier run left in db (moving those of
// the earlier outbox and checkpoints buckets into the one table, in their
// order). Register each kind with Handle, then Start.
func OpenQueue(db *journal.DB, o QueueOptions) (*Queue, error) {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	q := &Queue{table: journal.TableOf[Entry](db, journal.Handover), db: db, log: o.Log.Named("handover"),
		byID: map[Kind]map[string]*item{}, drainMu: map[Kind]*sync.Mutex{}, handlers: map[Kind]Handler{}, onChange: map[Kind]func(int){}, removed: make(chan struct{}), done: make(chan struct{})}
	q.loop = New(Options{Drain: q.drainAll, RetryMin: o.RetryMin, RetryMax: o.RetryMax, Pending: q.Pending,
		What: "queued hand-overs", Log: q.log})
	items, bad, err := q.table.Load(func(key string, e Entry) bool {
		_, perr := strconv.ParseUint(key, 16, 64)
		return perr == nil && e.Kind != "" && e.ID != ""
	})
	if err != nil {
		return nil, fmt.Errorf("handover: %w", err)
	}
	for _, k := range bad {
		q.log.Error("unreadable hand-over journal entry; set aside in the journal", zap.String("key", k))
	}
	for _, it := range items {
		n, _ := strconv.ParseUint(it.Key, 16, 64)
		q.next = max(q.next, n+1)
		q.add(&item{key: it.Key, e: it.Value, journaled: true})
	}
	if err := q.migrate(); err != nil {
		return nil, fmt.Errorf("handover: moving the earlier outbox and checkpoint entries: %w", err)
	}
	if n := len(q.items); n > 0 {
		q.log.Info("hand-overs from an earlier run will be sent to the API", zap.Int("pending", n))
	}
	return q, nil
}

// migrate moves the entries of the earlier outbox and checkpoints buckets
// into the handover table in one transaction (outbox messages in the
// order they were created, then the commits in commit order).
func (q *Queue) migrate() error {
	outbox := journal.TableOf[json.RawMessage](q.db, journal.Outbox)
	olds, bad, err := outbox.Load(nil)
	if err != nil {
		return err
	}
	for _, k := range bad {
		q.log.Error("unreadable outbox journal entry; set aside in the journal", zap.String("key", k))
	}
	cps := journal.TableOf[struct {
		Record    json.RawMessage `json:"record"`
		Persisted bool            `json:"persisted"`
		Attempts  int             `json:"attempts"`
	}](q.db, journal.Checkpoints)
	oldCps, bad, err := cps.Load(nil)
	if err != nil {
		return err
	}
	for _, k := range bad {
		q.log.Error("unreadable checkpoint journal entry; set aside in the journal (the API reconciles rows on hydrate)", zap.String("key", k))
	}
	if len(olds) == 0 && len(oldCps) == 0 {
		return nil
	}
	type created struct {
		CorrelationID string    `json:"correlationId"`
		CreatedAt     time.Time `json:"createdAt"`
	}
	at := make([]created, len(olds))
	for i, it := range olds {
		_ = json.Unmarshal(it.Value, &at[i])
		at[i].CorrelationID = it.Key
	}
	idx := make([]int, len(olds))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return at[idx[a]].CreatedAt.Before(at[idx[b]].CreatedAt) })
	var ops []journal.Op
	var add []*item
	put := func(e Entry) error {
		if q.find(e.Kind, e.ID) != nil {
			return nil
		}
		it := &item{key: q.nextKey(), e: e, journaled: true}
		op, err := q.table.PutOp(it.key, e)
		if err != nil {
			return err
		}
		ops, add = append(ops, op), append(add, it)
		return nil
	}
	for _, i := range idx {
		if err := put(Entry{Kind: Outbox, ID: olds[i].Key, Payload: olds[i].Value}); err != nil {
			return err
		}
		ops = append(ops, outbox.DeleteOp(olds[i].Key))
	}
	for _, it := range oldCps {
		var sha struct {
			CommitSHA string `json:"commitSha"`
		}
		if json.Unmarshal(it.Value.Record, &sha) != nil || sha.CommitSHA == "" {
			ops = append(ops, cps.DeleteOp(it.Key))
			continue
		}
		if err := put(Entry{Kind: Checkpoint, ID: sha.CommitSHA, Held: !it.Value.Persisted, Attempts: it.Value.Attempts,
			Payload: it.Value.Record}); err != nil {
			return err
		}
		ops = append(ops, cps.DeleteOp(it.Key))
	}
	if err := q.db.Apply(ops...); err != nil {
		return err
	}
	for _, it := range add {
		q.add(it)
	}
	return nil
}

// Handle registers the handler of kind k (before Start, or later: the
// kind's entries wait until it is registered).
func (q *Queue) Handle(k Kind, h Handler) {
	h.Batch = max(h.Batch, 1)
	if h.What == "" {
		h.What = string(k)
	}
	q.mu.Lock()
	q.handlers[k] = h
	q.mu.Unlock()
	q.loop.Wake()
}

// OnChange has fn told the number of k's entries after every change (a
// gauge).
func (q *Queue) OnChange(k Kind, fn func(n int)) {
	q.mu.Lock()
	q.onChange[k] = fn
	n := q.lenLocked(k)
	q.mu.Unlock()
	fn(n)
}

// Start runs the drain loop in the background until Close (idempotent).
func (q *Queue) Start() {
	q.run.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		q.cancel = cancel
		go func() {
			defer close(q.done)
			q.loop.Run(ctx)
		}()
	})
}

// Wake asks the loop for a drain now.
func (q *Queue) Wake() { q.loop.Wake() }

// Put queues a hand-over of kind k with id (once: an id already queued is
// not queued again), on disk before it returns; held entries wait for
// Release. If the journal cannot be written the entry is still handed over
// from memory (a restart before the API took it loses it) and the error
// returned.
func (q *Queue) Put(k Kind, id string, payload any, held bool) error {
	return q.PutWith(k, id, payload, held)
}

// PutWith is Put whose journal write carries also, ops of the same journal,
// in the same transaction (a reply's outbox entry and the end of its
// accepted message). An id already queued applies only also.
func (q *Queue) PutWith(k Kind, id string, payload any, held bool, also ...journal.Op) error {
	raw, err := json.Marshal(payload)
	if err != nil {
		return err
	}
	q.mu.Lock()
	if q.find(k, id) != nil {
		q.mu.Unlock()
		if len(also) == 0 {
			return nil
		}
		return q.db.Apply(also...)
	}
	// The entry is in memory (its place in the kind's order taken) but not
	// handed over until its journal write ends; the write is a group
	// commit outside q.mu, so the Puts of a burst share a few fsyncs.
	it := &item{key: q.nextKey(), e: Entry{Kind: k, ID: id, Held: held, Payload: raw}, writing: true}
	op, err := q.table.PutOp(it.key, it.e)
	q.add(it)
	q.changedLocked(k)
	q.mu.Unlock()
	if err == nil {
		err = q.db.ApplyGrouped(append([]journal.Op{op}, also...)...)
	}
	q.mu.Lock()
	it.writing = false
	it.journaled = err == nil
	gone := q.find(k, id) != it // dropped meanwhile (DropOldest)
	now := it.e                 // released meanwhile (Release)
	q.mu.Unlock()
	// The journal holds what memory holds.
	switch {
	case err != nil:
	case gone:
		if derr := q.db.Apply(q.table.DeleteOp(it.key)); derr != nil {
			q.log.Warn("removing a dropped hand-over from the journal failed", zap.String("id", id), zap.Error(derr))
		}
	case now.Held != held:
		if derr := q.table.PutAll([]journal.Item[Entry]{{Key: it.key, Value: now}}); derr != nil {
			q.log.Warn("saving a released hand-over in the journal failed", zap.String("id", id), zap.Error(derr))
		}
	}
	if err != nil {
		q.log.Error("writing the hand-over journal failed; the entry is kept in memory only until the API takes it",
			zap.String("kind", string(k)), zap.String("id", id), zap.Error(err))
	}
	if !held {
		q.loop.Wake()
	}
	return err
}

// Release lets the held entries of kind k with the given ids be handed
// over (durably) and wakes the loop.
func (q *Queue) Release(k Kind, ids []string) error {
	set := make(map[string]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	q.mu.Lock()
	var changed []journal.Item[Entry]
	var its []*item
	for _, it := range q.items {
		if it.e.Kind == k && it.e.Held && set[it.e.ID] {
			e := it.e
			e.Held = false
			its = append(its, it)
			if it.journaled {
				changed = append(changed, journal.Item[Entry]{Key: it.key, Value: e})
			}
		}
	}
	var err error
	if len(changed) > 0 {
		err = q.table.PutAll(changed)
	}
	if err == nil {
		for _, it := range its {
			it.e.Held = false
		}
		q.changedLocked(k)
	}
	q.mu.Unlock()
	if err == nil && len(its) > 0 {
		q.loop.Wake()
	}
	return err
}

// Entries returns kind k's entries in queue order (copies).
func (q *Queue) Entries(k Kind) []Entry {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []Entry
	for _, it := range q.items {
		if it.e.Kind == k {
			out = append(out, it.e)
		}
	}
	return out
}

// Len is the number of kind k's entries not handed over yet.
func (q *Queue) Len(k Kind) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.lenLocked(k)
}

// Pending is the number of entries not handed over yet, every kind.
func (q *Queue) Pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// DropOldest removes the oldest entries of kind k beyond keep (a bounded
// kind: the attempt log) and returns how many it removed.
func (q *Queue) DropOldest(k Kind, keep int) int {
	q.mu.Lock()
	over := q.lenLocked(k) - keep
	var gone []*item
	for _, it := range q.items {
		if len(gone) >= over {
			break
		}
		if it.e.Kind == k {
			gone = append(gone, it)
		}
	}
	q.mu.Unlock()
	if len(gone) > 0 {
		q.remove(gone, "")
	}
	return len(gone)
}

// Idle waits until kind k has no entry left, or ctx ends.
func (q *Queue) Idle(ctx context.Context, k Kind) error {
	for {
		q.mu.Lock()
		n, removed := q.lenLocked(k), q.removed
		q.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-removed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Drain hands over what the kinds (every registered kind when none is
// named) hold now, within ctx, and returns the failures that may pass
// (the entries stay queued). It is the loop's drain, run now: a flush, a
// view's last attempt at shutdown. The kinds drain side by side, each in
// its order, so a slow answer for one kind (an attempt batch) never holds
// another (a turn's checkpoint record).
func (q *Queue) Drain(ctx context.Context, kinds ...Kind) error {
	if len(kinds) == 0 {
		q.mu.Lock()
		for k := range q.handlers {
			kinds = append(kinds, k)
		}
		q.mu.Unlock()
		sort.Slice(kinds, func(i, j int) bool { return kinds[i] < kinds[j] })
	}
	errs := make([]error, len(kinds))
	var wg sync.WaitGroup
	for i, k := range kinds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := q.drainKind(ctx, k); err != nil {
				errs[i] = fmt.Errorf("%s: %w", k, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (q *Queue) drainAll(ctx context.Context) error { return q.Drain(ctx) }

// Close stops the loop and makes one last attempt to hand everything over
// within ctx; what is left stays in the journal for the next start
// (idempotent). The caller closes the journal after it.
func (q *Queue) Close(ctx context.Context) error {
	var err error
	q.closed.Do(func() {
		q.run.Do(func() { close(q.done) }) // never started: nothing to stop
		if q.cancel != nil {
			q.cancel()
		}
		<-q.done
		err = q.Drain(ctx)
		if n := q.Pending(); n > 0 {
			q.log.Warn("hand-overs not taken by the API yet stay in the journal for the next start",
				zap.Int("pending", n), zap.Error(err))
		}
	})
	return err
}

// drainKind sends kind k's entries that are not held, in queue order, in
// batches, until none is left or a failure that may pass.
func (q *Queue) drainKind(ctx context.Context, k Kind) error {
	q.mu.Lock()
	mu := q.drainMu[k]
	if mu == nil {
		mu = &sync.Mutex{}
		q.drainMu[k] = mu
	}
	q.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		q.mu.Lock()
		h, ok := q.handlers[k]
		var batch []*item
		if ok && (h.Paused == nil || !h.Paused()) {
			for _, it := range q.items {
				if it.e.Kind == k && it.writing {
					break // the kind's order: nothing after an entry not on disk yet
				}
				if it.e.Kind == k && !it.e.Held {
					batch = append(batch, it)
					if len(batch) == h.Batch {
						break
					}
				}
			}
		}
		entries := make([]Entry, len(batch))
		for i, it := range batch {
			entries[i] = it.e
		}
		q.mu.Unlock()
		if len(batch) == 0 {
			return nil
		}
		err := h.Send(ctx, entries)
		switch {
		case err == nil:
			q.remove(batch, "")
		case internalapi.Permanent(err):
			q.log.Error("the API refused a hand-over for good; set aside in the journal", zap.String("kind", string(k)),
				zap.String("what", h.What), zap.Strings("ids", ids(entries)), zap.Error(err))
			q.remove(batch, "rejected")
		default:
			q.failed(batch)
			return err
		}
	}
}

func ids(es []Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

// remove takes entries out of the queue: they leave the journal, or are
// set aside there as <kind>/<reason>/<id>.
func (q *Queue) remove(its []*item, reason string) {
	gone := make(map[*item]bool, len(its))
	for _, it := range its {
		gone[it] = true
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	kept := q.items[:0]
	kinds := map[Kind]bool{}
	var dels []journal.Op
	var err error
	for _, it := range q.items {
		if !gone[it] {
			kept = append(kept, it)
			continue
		}
		kinds[it.e.Kind] = true
		delete(q.byID[it.e.Kind], it.e.ID)
		switch {
		case !it.journaled:
		case reason == "":
			dels = append(dels, q.table.DeleteOp(it.key))
		default:
			err = errors.Join(err, q.table.SetAsideAs(it.key, string(it.e.Kind)+"/"+reason+"/"+it.e.ID))
		}
	}
	if len(dels) > 0 {
		err = errors.Join(err, q.db.Apply(dels...))
	}
	if err != nil {
		// A leftover entry is handed over again after a restart; the
		// API's idempotency on the id makes that harmless.
		q.log.Warn("removing hand-over journal entries failed", zap.Int("entries", len(its)), zap.Error(err))
	}
	clear(q.items[len(kept):])
	q.items = kept
	for k := range kinds {
		q.changedLocked(k)
	}
	close(q.removed)
	q.removed = make(chan struct{})
}

// failed counts a failed hand-over of each entry (kept in the journal
// with the entry).
func (q *Queue) failed(its []*item) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var changed []journal.Item[Entry]
	for _, it := range its {
		if q.find(it.e.Kind, it.e.ID) != it {
			continue // dropped meanwhile (DropOldest): not written back
		}
		it.e.Attempts++
		if it.journaled {
			changed = append(changed, journal.Item[Entry]{Key: it.key, Value: it.e})
		}
	}
	_ = q.table.PutAll(changed) // only a count
}

func (q *Queue) find(k Kind, id string) *item { return q.byID[k][id] }

func (q *Queue) add(it *item) {
	q.items = append(q.items, it)
	m := q.byID[it.e.Kind]
	if m == nil {
		m = map[string]*item{}
		q.byID[it.e.Kind] = m
	}
	m[it.e.ID] = it
}

func (q *Queue) nextKey() string {
	k := fmt.Sprintf("%016x", q.next)
	q.next++
	return k
}

func (q *Queue) lenLocked(k Kind) int {
	n := 0
	for _, it := range q.items {
		if it.e.Kind == k {
			n++
		}
	}
	return n
}

func (q *Queue) changedLocked(k Kind) {
	if fn := q.onChange[k]; fn != nil {
		fn(q.lenLocked(k))
	}
}

// DB is the queue's journal.
func (q *Queue) DB() *journal.DB { return q.db }

// Journaled reads kind k's entries from the journal file itself, in queue
// order (what a restart would hand over; tests and an operator's look).
func Journaled(db *journal.DB, k Kind) ([]Entry, error) {
	items, _, err := journal.TableOf[Entry](db, journal.Handover).Load(nil)
	var out []Entry
	for _, it := range items {
		if it.Value.Kind == k {
			out = append(out, it.Value)
		}
	}
	return out, err
}
