package checkpoints_test

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/podagent/internal/checkpoints"
	"github.com/svc-dev/svc/podagent/internal/handover"
	"github.com/svc-dev/svc/podagent/internal/journal"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/wire"
)

// poster stands in for the API's record endpoint: it answers each sha with
// the error in fail (nil: recorded) and remembers what was posted, in order.
type poster struct {
	fail   map[string]error
	posted []string
}

func (p *poster) RecordCheckpoint(_ context.Context, rec wire.CheckpointRecord) (wire.CheckpointRecordResponse, error) {
	p.posted = append(p.posted, rec.CommitSHA)
	if err := p.fail[rec.CommitSHA]; err != nil {
		return wire.CheckpointRecordResponse{}, err
	}
	return wire.CheckpointRecordResponse{ID: "ckpt_" + rec.CommitSHA, Created: true}, nil
}

func record(sha string) wire.CheckpointRecord {
	return wire.CheckpointRecord{CommitSHA: sha, CommitSummary: wire.CommitSummary{Message: "turn " + sha, Author: "agent", Branch: "main"},
		CreatedAt: time.Unix(1700000000, 0).UTC()}
}

func open(t *testing.T, path string, p checkpoints.Poster) (*checkpoints.Recorder, *journal.DB) {
	t.Helper()
	db, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	q, err := handover.OpenQueue(db, handover.QueueOptions{Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := checkpoints.Open(q, p, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return r, db
}

// A commit is posted only once persisted, in commit order; a record the API
// refuses as invalid (400) is dropped, any other failure stops the flush and
// keeps the rest; and what is left survives a restart of the pod.
func TestRecorderPostsPersistedCommitsInOrderAndSurvivesARestart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), journal.FileName)
	down := errors.New("connection refused")
	p := &poster{fail: map[string]error{
		"b": &internalapi.StatusError{Op: "record checkpoint", Status: http.StatusBadRequest},
		"c": down,
	}}
	r, db := open(t, path, p)
	var pending []int
	r.OnPendingChange = func(n int) { pending = append(pending, n) }

	for _, sha := range []string{"a", "b", "c", "d", "a"} { // "a" twice: remembered once
		if err := r.Remember(record(sha)); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.PendingSHAs(); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Fatalf("pending after Remember = %v, want a b c d", got)
	}
	// Nothing is persisted yet: nothing may be posted.
	if err := r.Flush(context.Background()); err != nil || len(p.posted) != 0 {
		t.Fatalf("flush before persist: err %v, posted %v; want nothing posted", err, p.posted)
	}
	if err := r.MarkPersisted([]string{"a", "b", "c"}); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(context.Background()); !errors.Is(err, down) {
		t.Fatalf("flush = %v, want the API's failure on c", err)
	}
	if !slices.Equal(p.posted, []string{"a", "b", "c"}) {
		t.Fatalf("posted %v, want a b c in commit order (d is not persisted)", p.posted)
	}
	if got := r.PendingSHAs(); !slices.Equal(got, []string{"c", "d"}) {
		t.Fatalf("pending after flush = %v, want c (failed) and d (not persisted)", got)
	}
	if want := []int{1, 2, 3, 4, 4, 3, 2}; !slices.Equal(pending, want) {
		t.Errorf("pending counts reported %v, want %v", pending, want)
	}

	// A restart: the journal file holds c (persisted, one attempt) and d.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	p2 := &poster{}
	r2, db2 := open(t, path, p2)
	defer db2.Close()
	got := r2.Pending()
	if len(got) != 2 || got[0].Record.CommitSHA != "c" || !got[0].Persisted || got[0].Attempts != 1 ||
		got[1].Record.CommitSHA != "d" || got[1].Persisted {
		t.Fatalf("after a restart: %+v; want c (persisted, 1 attempt) then d (not persisted)", got)
	}
	if err := r2.Flush(context.Background()); err != nil || !slices.Equal(p2.posted, []string{"c"}) {
		t.Fatalf("flush after restart: err %v, posted %v; want c only", err, p2.posted)
	}
	if r2.Len() != 1 {
		t.Fatalf("left %d, want d only", r2.Len())
	}
}
