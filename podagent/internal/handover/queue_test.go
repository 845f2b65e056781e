package handover_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/svc-dev/svc/podagent/internal/handover"
	"github.com/svc-dev/svc/podagent/internal/journal"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/wire"
)

// api stands in for the API's hand-over routes: it answers each id with
// the error of fail (nil: taken) and keeps, per kind, the ids it took, in
// order, and the size of each batch.
type api struct {
	mu      sync.Mutex
	fail    map[string]error
	took    map[handover.Kind][]string
	batches map[handover.Kind][]int
	calls   chan handover.Kind // one per Send (dropped when full)
}

func newAPI() *api {
	return &api{fail: map[string]error{}, took: map[handover.Kind][]string{}, batches: map[handover.Kind][]int{},
		calls: make(chan handover.Kind, 100)}
}

func (a *api) handler(k handover.Kind, batch int) handover.Handler {
	return handover.Handler{Batch: batch, What: string(k), Send: func(_ context.Context, es []handover.Entry) error {
		a.mu.Lock()
		defer func() {
			a.mu.Unlock()
			select {
			case a.calls <- k:
			default:
			}
		}()
		for _, e := range es {
			if err := a.fail[e.ID]; err != nil {
				return err
			}
		}
		for _, e := range es {
			a.took[k] = append(a.took[k], e.ID)
		}
		a.batches[k] = append(a.batches[k], len(es))
		return nil
	}}
}

func (a *api) set(id string, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.fail[id] = err
}

func (a *api) taken(k handover.Kind) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.took[k])
}

var (
	down    = &internalapi.StatusError{Op: "put", Status: http.StatusServiceUnavailable}
	refused = &internalapi.StatusError{Op: "put", Status: http.StatusBadRequest}
)

func openDB(t *testing.T, dir string) *journal.DB {
	t.Helper()
	db, err := journal.OpenState(dir, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func openQueue(t *testing.T, db *journal.DB, o handover.QueueOptions, a *api) *handover.Queue {
	t.Helper()
	q, err := handover.OpenQueue(db, o)
	if err != nil {
		t.Fatal(err)
	}
	q.Handle(handover.Outbox, a.handler(handover.Outbox, 1))
	q.Handle(handover.Attempts, a.handler(handover.Attempts, 3))
	q.Handle(handover.Checkpoint, a.handler(handover.Checkpoint, 1))
	return q
}

func put(t *testing.T, q *handover.Queue, k handover.Kind, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if err := q.Put(k, id, map[string]string{"id": id}, false); err != nil {
			t.Fatal(err)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Each kind is handed over in the order it was queued, in its batch size,
// an id queued twice once, and a held entry only once released.
func TestQueueKeepsTheOrderOfEachKind(t *testing.T) {
	t.Parallel()
	a := newAPI()
	q := openQueue(t, openDB(t, t.TempDir()), handover.QueueOptions{}, a)
	must(t, q.Put(handover.Checkpoint, "c1", "r1", true))
	put(t, q, handover.Outbox, "o1")
	put(t, q, handover.Attempts, "a1", "a2")
	must(t, q.Put(handover.Checkpoint, "c2", "r2", true))
	put(t, q, handover.Outbox, "o2", "o1")
	put(t, q, handover.Attempts, "a3", "a4", "a5", "a6", "a7")
	must(t, q.Drain(context.Background()))
	if got := a.taken(handover.Checkpoint); len(got) != 0 {
		t.Fatalf("held checkpoints handed over: %v", got)
	}
	must(t, q.Release(handover.Checkpoint, []string{"c1", "c2"}))
	must(t, q.Drain(context.Background()))
	for k, want := range map[handover.Kind][]string{
		handover.Outbox:     {"o1", "o2"},
		handover.Attempts:   {"a1", "a2", "a3", "a4", "a5", "a6", "a7"},
		handover.Checkpoint: {"c1", "c2"},
	} {
		if got := a.taken(k); !slices.Equal(got, want) {
			t.Errorf("%s handed over %v, want %v", k, got, want)
		}
	}
	if got := a.batches[handover.Attempts]; !slices.Equal(got, []int{3, 3, 1}) {
		t.Errorf("attempt batches %v, want 3 3 1", got)
	}
	if q.Pending() != 0 {
		t.Fatalf("%d left", q.Pending())
	}
}

// An entry the API refuses for good is set aside in the journal with an
// error log line naming it; the entries before and after it, of its kind
// and of the others, are handed over.
func TestPermanentRefusalSetsAsideOnlyThatEntry(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.InfoLevel)
	a := newAPI()
	a.set("o2", refused)
	db := openDB(t, t.TempDir())
	q := openQueue(t, db, handover.QueueOptions{Log: zap.New(core)}, a)
	put(t, q, handover.Outbox, "o1", "o2", "o3")
	put(t, q, handover.Attempts, "a1")
	must(t, q.Drain(context.Background()))
	if got := a.taken(handover.Outbox); !slices.Equal(got, []string{"o1", "o3"}) {
		t.Fatalf("outbox handed over %v, want o1 o3", got)
	}
	if got := a.taken(handover.Attempts); !slices.Equal(got, []string{"a1"}) {
		t.Fatalf("attempts handed over %v", got)
	}
	if q.Pending() != 0 {
		t.Fatalf("%d left: a refused entry must not stay queued", q.Pending())
	}
	aside, err := db.SetAsideEntries()
	must(t, err)
	if _, ok := aside["outbox/rejected/o2"]; !ok || len(aside) != 1 {
		t.Fatalf("set aside %v, want outbox/rejected/o2 only", aside)
	}
	lines := logs.FilterMessageSnippet("refused a hand-over for good").All()
	if len(lines) != 1 || lines[0].Level != zapcore.ErrorLevel || !slices.Equal(lines[0].ContextMap()["ids"].([]any), []any{"o2"}) {
		t.Fatalf("log lines %+v, want one error naming o2", lines)
	}
}

// A failure that may pass stops its kind (the later entries wait behind
// it, the other kinds go on) and is retried by the loop after growing
// backoff steps, each failure counted with the entry; once the API takes
// it, the entry is gone.
func TestTransientFailureIsRetriedWithBackoff(t *testing.T) {
	t.Parallel()
	a := newAPI()
	a.set("o1", down)
	q := openQueue(t, openDB(t, t.TempDir()), handover.QueueOptions{RetryMin: 30 * time.Millisecond, RetryMax: 60 * time.Millisecond}, a)
	put(t, q, handover.Outbox, "o1", "o2")
	put(t, q, handover.Attempts, "a1")
	if err := q.Drain(context.Background()); !errors.Is(err, down) {
		t.Fatalf("drain = %v, want the API's failure", err)
	}
	if got := a.taken(handover.Outbox); len(got) != 0 {
		t.Fatalf("o2 went before o1: %v", got)
	}
	if got := a.taken(handover.Attempts); !slices.Equal(got, []string{"a1"}) {
		t.Fatalf("the other kind waited: %v", got)
	}
	if es := q.Entries(handover.Outbox); len(es) != 2 || es[0].Attempts != 1 {
		t.Fatalf("entries %+v, want o1 with one failed attempt first", es)
	}

	for len(a.calls) > 0 { // the calls of the Drain above
		<-a.calls
	}
	var times []time.Time
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q.Start()
	t.Cleanup(func() { _ = q.Close(ctx) })
	for len(times) < 4 {
		k := <-a.calls
		if k == handover.Outbox {
			times = append(times, time.Now())
		}
	}
	for i := 1; i < len(times); i++ {
		// 30 ms, 60 ms, 60 ms (capped), each -20 % at worst.
		if gap := times[i].Sub(times[i-1]); gap < 24*time.Millisecond {
			t.Fatalf("retry %d after %s: want a backoff step of at least 24ms", i, gap)
		}
	}
	a.set("o1", nil)
	idle, cancelIdle := context.WithTimeout(ctx, 30*time.Second)
	defer cancelIdle()
	if err := q.Idle(idle, handover.Outbox); err != nil {
		t.Fatalf("still pending %v: %v", q.Entries(handover.Outbox), err)
	}
	if got := a.taken(handover.Outbox); !slices.Equal(got, []string{"o1", "o2"}) {
		t.Fatalf("handed over %v, want o1 then o2, once each", got)
	}
}

// A Put wakes the loop: it drains at once, even while it waits a long
// backoff step after a failure of another kind.
func TestWakeDrainsAtOnce(t *testing.T) {
	t.Parallel()
	a := newAPI()
	a.set("c1", down)
	q := openQueue(t, openDB(t, t.TempDir()), handover.QueueOptions{RetryMin: time.Hour}, a)
	must(t, q.Put(handover.Checkpoint, "c1", "r", false))
	q.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = q.Close(ctx)
	})
	if k := <-a.calls; k != handover.Checkpoint { // failed: the next try is an hour away
		t.Fatalf("first call %s", k)
	}
	put(t, q, handover.Outbox, "o1")
	timeout := time.After(30 * time.Second) // far below the hour of backoff
	for k := handover.Kind(""); k != handover.Outbox; {
		select {
		case k = <-a.calls:
		case <-timeout:
			t.Fatal("the Put did not wake the loop")
		}
	}
	if got := a.taken(handover.Outbox); !slices.Equal(got, []string{"o1"}) {
		t.Fatalf("handed over %v", got)
	}
	if q.Len(handover.Checkpoint) != 1 {
		t.Fatal("the failed checkpoint record left the queue")
	}
}

// What the API had not taken when the pod stopped is in the journal file:
// the next run's queue hands it over in the same order, held entries still
// held, each exactly once, and the journal is empty after.
func TestQueueSurvivesARestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := newAPI()
	for _, id := range []string{"o1", "a1", "c1"} {
		a.set(id, down)
	}
	db, err := journal.OpenState(dir, journal.Options{})
	must(t, err)
	q := openQueue(t, db, handover.QueueOptions{}, a)
	put(t, q, handover.Outbox, "o1", "o2")
	put(t, q, handover.Attempts, "a1", "a2")
	must(t, q.Put(handover.Checkpoint, "c1", "r1", false))
	must(t, q.Put(handover.Checkpoint, "c2", "r2", true))
	if err := q.Close(context.Background()); err == nil {
		t.Fatal("Close with the API down: want its failure")
	}
	must(t, db.Close()) // the pod process ends

	b := newAPI()
	db2 := openDB(t, dir)
	q2 := openQueue(t, db2, handover.QueueOptions{}, b)
	if es := q2.Entries(handover.Checkpoint); len(es) != 2 || es[0].Held || !es[1].Held || es[0].Attempts != 1 {
		t.Fatalf("checkpoints after the restart %+v: want c1 (released, one failure) then c2 (held)", es)
	}
	var payload string
	must(t, json.Unmarshal(q2.Entries(handover.Checkpoint)[1].Payload, &payload))
	if payload != "r2" {
		t.Fatalf("payload %q", payload)
	}
	must(t, q2.Drain(context.Background()))
	must(t, q2.Release(handover.Checkpoint, []string{"c2"}))
	must(t, q2.Close(context.Background()))
	for k, want := range map[handover.Kind][]string{
		handover.Outbox:     {"o1", "o2"},
		handover.Attempts:   {"a1", "a2"},
		handover.Checkpoint: {"c1", "c2"},
	} {
		if got := b.taken(k); !slices.Equal(got, want) {
			t.Errorf("%s handed over %v after the restart, want %v once each", k, got, want)
		}
	}
	if n, err := db2.Len(journal.Handover); err != nil || n != 0 {
		t.Fatalf("the journal holds %d hand-overs (%v)", n, err)
	}
}

// A journal of an earlier version kept outbox messages and checkpoint
// records in buckets of their own: the queue moves them into its table at
// open (outbox messages in the order they were created, commits in commit
// order, persisted or not), and the old buckets are empty after.
func TestQueueTakesOverTheEarlierBuckets(t *testing.T) {
	t.Parallel()
	db := openDB(t, t.TempDir())
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ob := journal.TableOf[wire.OutboxPut](db, journal.Outbox)
	must(t, ob.Put("late", wire.OutboxPut{ChannelID: "ch", OutboxReply: wire.OutboxReply{CorrelationID: "late", CreatedAt: t0.Add(time.Minute)}}))
	must(t, ob.Put("early", wire.OutboxPut{ChannelID: "ch", OutboxReply: wire.OutboxReply{CorrelationID: "early", CreatedAt: t0}}))
	type cp struct {
		Record    wire.CheckpointRecord `json:"record"`
		Persisted bool                  `json:"persisted"`
		Attempts  int                   `json:"attempts"`
	}
	cps := journal.TableOf[cp](db, journal.Checkpoints)
	_, err := cps.Append(cp{Record: wire.CheckpointRecord{CommitSHA: "s1"}, Persisted: true, Attempts: 2})
	must(t, err)
	_, err = cps.Append(cp{Record: wire.CheckpointRecord{CommitSHA: "s2"}})
	must(t, err)

	q := openQueue(t, db, handover.QueueOptions{}, newAPI())
	var got []string
	for _, k := range []handover.Kind{handover.Outbox, handover.Checkpoint} {
		for _, e := range q.Entries(k) {
			got = append(got, e.ID)
		}
	}
	if !slices.Equal(got, []string{"early", "late", "s1", "s2"}) {
		t.Fatalf("entries %v", got)
	}
	if es := q.Entries(handover.Checkpoint); es[0].Held || es[0].Attempts != 2 || !es[1].Held {
		t.Fatalf("checkpoints %+v: want s1 released with two failures, s2 held", es)
	}
	for _, k := range []journal.Kind{journal.Outbox, journal.Checkpoints} {
		if n, err := db.Len(k); err != nil || n != 0 {
			t.Fatalf("bucket %s holds %d (%v)", k, n, err)
		}
	}
}

// The kinds drain side by side: while the API holds an attempt batch, a
// turn's checkpoint record is handed over at once.
func TestASlowKindHoldsNoOther(t *testing.T) {
	t.Parallel()
	a := newAPI()
	q := openQueue(t, openDB(t, t.TempDir()), handover.QueueOptions{}, a)
	held, gate := make(chan struct{}), make(chan struct{})
	q.Handle(handover.Attempts, handover.Handler{Send: func(ctx context.Context, _ []handover.Entry) error {
		close(held)
		select {
		case <-gate:
		case <-ctx.Done():
		}
		return nil
	}})
	put(t, q, handover.Attempts, "a1")
	q.Start()
	t.Cleanup(func() { close(gate); _ = q.Close(context.Background()) })
	<-held
	must(t, q.Put(handover.Checkpoint, "c1", "r", false))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	must(t, q.Drain(ctx, handover.Checkpoint))
	if got := a.taken(handover.Checkpoint); !slices.Equal(got, []string{"c1"}) {
		t.Fatalf("checkpoints handed over %v while the attempt batch was held", got)
	}
}
