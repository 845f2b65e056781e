package attemptlog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/podagent/internal/attemptlog"
	"github.com/svc-dev/svc/podagent/internal/handover"
	"github.com/svc-dev/svc/podagent/internal/journal"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/wire"
)

// api is the API's POST /internal/projects/{id}/webhook/attempts: it
// answers status and keeps the ids it accepted.
type api struct {
	*httptest.Server
	mu     sync.Mutex
	status int
	ids    map[string]int // times each id was posted while up
	sizes  []int
}

func newAPI(t *testing.T, status int) *api {
	a := &api{status: status, ids: map[string]int{}}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in wire.WebhookAttemptsPut
		if r.URL.Path != "/internal/projects/prj_1"+internalapi.PathWebhookAttempts || r.Header.Get("Authorization") != "Bearer rt" ||
			json.NewDecoder(r.Body).Decode(&in) != nil {
			http.Error(w, `{"error":{"code":"bad"}}`, http.StatusTeapot)
			return
		}
		a.mu.Lock()
		status := a.status
		if status == http.StatusOK {
			for _, x := range in.Attempts {
				a.ids[x.ID]++
			}
			a.sizes = append(a.sizes, len(in.Attempts))
		}
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"stored":0,"error":{"code":"x","message":"y"}}`))
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *api) set(status int) {
	a.mu.Lock()
	a.status = status
	a.mu.Unlock()
}

func rec(i int) wire.WebhookAttempt {
	return wire.WebhookAttempt{ID: fmt.Sprintf("att_%03d", i), CorrelationID: "cor_1", Attempt: i + 1}
}

func open(t *testing.T, a *api, o attemptlog.Options) *attemptlog.Recorder {
	t.Helper()
	if o.Journal == nil {
		o.Journal = openDB(t, t.TempDir())
	}
	r := newRecorder(t, a, o)
	t.Cleanup(func() { _ = r.Close(context.Background()) }) // before the journal closes
	return r
}

func newRecorder(t *testing.T, a *api, o attemptlog.Options) *attemptlog.Recorder {
	t.Helper()
	o.Poster = &internalapi.Client{BaseURL: a.URL, ProjectID: "prj_1", Token: "rt"}
	o.Log = zaptest.NewLogger(t)
	o.RetryMin, o.RetryMax = time.Millisecond, 5*time.Millisecond
	r, err := attemptlog.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// openDB opens the journal of the state directory dir (a pod's start).
func openDB(t *testing.T, dir string) *journal.DB {
	t.Helper()
	db, err := journal.OpenState(dir, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// While the API is down records wait; once it is back every record is
// handed over exactly once, in batches no larger than Batch.
func TestRecordsWaitForTheAPIAndArriveOnce(t *testing.T) {
	t.Parallel()
	a := newAPI(t, http.StatusServiceUnavailable)
	r := open(t, a, attemptlog.Options{Batch: 7})
	for i := range 30 {
		r.Record(rec(i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := r.Flush(ctx); err == nil || r.Pending() != 30 {
		t.Fatalf("flush with the API down = %v, pending %d: want a timeout and all 30 waiting", err, r.Pending())
	}
	a.set(http.StatusOK)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	if err := r.Flush(ctx2); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.ids) != 30 || r.Posted() != 30 {
		t.Fatalf("%d ids at the API, %d posted", len(a.ids), r.Posted())
	}
	for id, n := range a.ids {
		if n != 1 {
			t.Fatalf("%s posted %d times", id, n)
		}
	}
	for _, s := range a.sizes {
		if s > 7 {
			t.Fatalf("a batch of %d records, above the batch size", s)
		}
	}
}

// A batch the API refuses for good (400) is dropped rather than retried
// forever; a full queue drops its oldest records and counts them.
func TestRefusedBatchAndFullQueue(t *testing.T) {
	t.Parallel()
	a := newAPI(t, http.StatusBadRequest)
	r := open(t, a, attemptlog.Options{})
	r.Record(rec(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Flush(ctx); err != nil || r.Posted() != 1 {
		t.Fatalf("flush = %v, posted %d: a refused batch must not stay queued", err, r.Posted())
	}

	down := newAPI(t, http.StatusServiceUnavailable)
	db := openDB(t, t.TempDir())
	full := open(t, down, attemptlog.Options{Capacity: 5, Journal: db})
	for i := range 8 {
		full.Record(rec(i))
	}
	if full.Pending() != 5 || full.Dropped() != 3 {
		t.Fatalf("pending %d dropped %d, want 5 and 3", full.Pending(), full.Dropped())
	}
	// The journal holds what memory holds: the five newest, also after
	// the failed hand-overs counted their attempts.
	_ = full.Close(context.Background())
	kept, err := handover.Journaled(db, handover.Attempts)
	must(t, err)
	if len(kept) != 5 || kept[0].ID != rec(3).ID || kept[4].ID != rec(7).ID {
		t.Fatalf("journal holds %d records (%+v), want att_003..att_007", len(kept), kept)
	}
}

// The attempt log survives a restart of the pod: records made while the
// API was down, the pod stopped before the API took them (its last attempt
// at Close refused too), arrive once the next run's queue meets the API, each
// exactly once, and the journal is empty after.
func TestRecordsSurviveARestartAndArriveOnce(t *testing.T) {
	t.Parallel()
	a := newAPI(t, http.StatusServiceUnavailable)
	dir := t.TempDir()
	db, err := journal.OpenState(dir, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := newRecorder(t, a, attemptlog.Options{Journal: db, Batch: 4})
	for i := range 10 {
		r.Record(rec(i))
	}
	if err := r.Close(context.Background()); err == nil {
		t.Fatal("Close with the API down: want its failure")
	}
	if err := db.Close(); err != nil { // the pod process ends
		t.Fatal(err)
	}
	a.mu.Lock()
	if len(a.ids) != 0 {
		t.Fatalf("the API took %d records while down", len(a.ids))
	}
	a.mu.Unlock()

	a.set(http.StatusOK)
	db2 := openDB(t, dir) // the next pod process
	r2 := newRecorder(t, a, attemptlog.Options{Journal: db2, Batch: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	must(t, r2.Close(context.Background()))
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.ids) != 10 {
		t.Fatalf("%d records reached the API after the restart, want 10", len(a.ids))
	}
	for id, n := range a.ids {
		if n != 1 {
			t.Fatalf("%s posted %d times", id, n)
		}
	}
	if n, err := db2.Len(journal.Handover); err != nil || n != 0 {
		t.Fatalf("the journal still holds %d hand-overs (%v)", n, err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
