package pod

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/svc-dev/svc/podagent/internal/checkpoints"
	"github.com/svc-dev/svc/podagent/internal/journal"
)

// The journal is opened before cold start; a restore that replaces the
// (headless) .git carries the open journal file into the restored one, so
// what the pod journals after the restore is in the file a restart reads.
func TestJournalSurvivesTheRestoreOfDotGit(t *testing.T) {
	t.Parallel()
	store := storeKinds()[0].open(t)
	api := newFakeAPI(t, "p1")
	ws := t.TempDir()
	writeFile(t, ws, "x", "0")
	p := startPod(t, api.options(ws, store))
	writeFile(t, ws, "x", "1")
	if _, err := p.Turn(context.Background(), "turn 1"); err != nil {
		t.Fatal(err)
	}
	p.Shutdown(context.Background())

	// A new pod on an empty volume restores .git; the API is down, so the
	// next turn's record stays in the journal.
	api.down.Store(true)
	ws2 := t.TempDir()
	p2 := startPod(t, api.options(ws2, store))
	if !p2.ColdStart.Restored {
		t.Fatalf("cold start %+v: .git not restored", p2.ColdStart)
	}
	writeFile(t, ws2, "x", "2")
	sha, err := p2.Turn(context.Background(), "turn 2")
	if err != nil {
		t.Fatal(err)
	}
	if p2.Recorder.Len() == 0 {
		t.Fatal("no record pending with the API down")
	}
	p2.Close()
	db, err := journal.OpenState(filepath.Join(ws2, ".git", "svc-agent"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	onDisk, err := checkpoints.Journaled(db)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, it := range onDisk {
		found = found || it.Record.CommitSHA == sha
	}
	if !found {
		t.Fatalf("the record of %s is not in the journal file after the restore: %+v", sha, onDisk)
	}
}
