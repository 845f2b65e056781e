package pod

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svc-dev/svc/podagent/internal/durable"
	"github.com/svc-dev/svc/podagent/internal/gitsync"
	"github.com/svc-dev/svc/shared/archive/archivetest"
	"github.com/svc-dev/svc/shared/objstore"
)

// N turns -> N commits, N records; the durable object restores to exactly
// that history in a new directory.
func TestTurnsCommitPersistRecordAndRestore(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store objstore.Store) {
		api, ws := newProject(t)
		writeFile(t, ws, "README.md", "hello\n")
		writeFile(t, ws, ".gitignore", "node_modules/\n.env\n")
		p := startPod(t, api.options(ws, store))
		if !p.ColdStart.Seeded {
			t.Fatalf("cold start = %+v, want seeded", p.ColdStart)
		}
		seed := p.ColdStart.Head
		if _, err := store.Head(context.Background(), objstore.RepoKey("p1")); err != nil {
			t.Fatalf("seed not persisted: %v", err)
		}

		const n = 5
		var shas []string
		for i := 1; i <= n; i++ {
			writeFile(t, ws, fmt.Sprintf("src/file%d.txt", i), strings.Repeat("line\n", i))
			writeFile(t, ws, "README.md", fmt.Sprintf("hello %d\n", i))
			sha, err := p.Turn(context.Background(), fmt.Sprintf("turn %d", i))
			if err != nil || len(sha) != 40 {
				t.Fatalf("turn %d: sha=%q err=%v", i, sha, err)
			}
			shas = append(shas, sha)
			if got := len(api.recorded()); got != i {
				t.Fatalf("after turn %d: %d records", i, got)
			}
		}
		// A turn that changed nothing: no commit, no row.
		writeFile(t, ws, ".env", "SECRET=ignored\n")
		if sha, err := p.Turn(context.Background(), "idle turn"); sha != "" || err != nil {
			t.Fatalf("no-op turn: sha=%q err=%v", sha, err)
		}
		recs := api.recorded()
		if len(recs) != n {
			t.Fatalf("%d records, want %d", len(recs), n)
		}
		for i, rec := range recs {
			wantParent := seed
			if i > 0 {
				wantParent = shas[i-1]
			}
			if rec.CommitSHA != shas[i] || rec.ParentSHA != wantParent || rec.Message != fmt.Sprintf("turn %d", i+1) ||
				rec.Branch != "main" || rec.FilesChanged != 2 || rec.Additions != i+2 || rec.Deletions != 1 ||
				rec.Author != "svc agent <agent@svc.invalid>" || rec.CreatedAt.IsZero() {
				t.Fatalf("record %d = %+v", i, rec)
			}
		}
		if got := gitIn(t, ws, "rev-list", "--count", "HEAD"); got != fmt.Sprint(n+1) {
			t.Fatalf("%s commits, want %d", got, n+1)
		}
		if gc := gitIn(t, ws, "config", "gc.auto"); gc != "0" {
			t.Fatalf("gc.auto = %q", gc)
		}
		if p.Recorder.Len() != 0 {
			t.Fatalf("%d records pending", p.Recorder.Len())
		}
		// The object holds .git only: no lock files, no pod state.
		for name := range archivetest.StoredEntries(t, store, objstore.RepoKey("p1")) {
			if strings.HasSuffix(name, ".lock") || strings.HasPrefix(name, durable.StateDirName) || strings.HasPrefix(name, ".git/") {
				t.Fatalf("unexpected entry %q in repo.git.tar.gz", name)
			}
		}
		// project-src.tar.gz is suppressed in git_only while healthy.
		if _, err := store.Head(context.Background(), objstore.SourceKey("p1")); !errors.Is(err, objstore.ErrNotExist) {
			t.Fatalf("layer 2 written while healthy: %v", err)
		}
		p.Close()

		// Restore into a new directory: exactly that history.
		ws2 := t.TempDir()
		writeFile(t, ws2, "untracked-asset.bin", "keep me")
		p2 := startPod(t, api.options(ws2, store))
		if !p2.ColdStart.Restored || p2.ColdStart.Head != shas[n-1] {
			t.Fatalf("restore = %+v", p2.ColdStart)
		}
		if a, b := gitIn(t, ws, "rev-list", "HEAD"), gitIn(t, ws2, "rev-list", "HEAD"); a != b {
			t.Fatalf("history differs:\n%s\n---\n%s", a, b)
		}
		for i := 1; i <= n; i++ {
			b, err := os.ReadFile(filepath.Join(ws2, fmt.Sprintf("src/file%d.txt", i)))
			if err != nil || string(b) != strings.Repeat("line\n", i) {
				t.Fatalf("file%d: %q %v", i, b, err)
			}
		}
		if b, _ := os.ReadFile(filepath.Join(ws2, "untracked-asset.bin")); string(b) != "keep me" {
			t.Fatal("restore removed an untracked file")
		}
		if st := gitIn(t, ws2, "status", "--porcelain", "--untracked-files=no"); st != "" {
			t.Fatalf("work tree not at HEAD: %s", st)
		}
		gitIn(t, ws2, "fsck", "--connectivity-only")
		// Restore does nothing when .git is already local.
		p2.Close()
		p3 := startPod(t, api.options(ws2, store))
		if !p3.ColdStart.Local || p3.Durable.Fenced() {
			t.Fatalf("restart on the same disk = %+v fenced=%v", p3.ColdStart, p3.Durable.Fenced())
		}
	})
}

// Two pods on one project: the newer pod owns it (docs/sync-modes.md §11).
// The older one's next write is refused before it touches the store: it
// stops, says so once, and its commit is neither persisted nor recorded;
// the newer keeps writing.
func TestSecondPodCannotOverwriteNewerHistory(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store objstore.Store) {
		api := newFakeAPI(t, "p1")
		wsA, wsB := t.TempDir(), t.TempDir()
		writeFile(t, wsA, "a.txt", "a0")
		logA, logs := observed(t)
		podA := startPod(t, Options{Config: testConfig("p1", wsA, api.srv.URL), Store: store, Log: logA})
		writeFile(t, wsA, "a.txt", "a1")
		if _, err := podA.Turn(context.Background(), "A turn 1"); err != nil {
			t.Fatal(err)
		}
		podB := startPod(t, api.options(wsB, store))
		if !podB.ColdStart.Restored {
			t.Fatal("B did not restore")
		}
		restored, _ := store.Head(context.Background(), objstore.RepoKey("p1"))

		writeFile(t, wsA, "a.txt", "a2")
		if _, err := podA.Turn(context.Background(), "A turn 2"); !errors.Is(err, gitsync.ErrFenced) {
			t.Fatalf("A turn 2: err = %v, want ErrFenced", err)
		}
		if after, _ := store.Head(context.Background(), objstore.RepoKey("p1")); after.ETag != restored.ETag {
			t.Fatal("the older pod overwrote the durable object after the newer one claimed the project")
		}
		// A refuses further writes outright and is not ready.
		writeFile(t, wsA, "a.txt", "a3")
		if sha, err := podA.Turn(context.Background(), "A turn 3"); sha != "" || !errors.Is(err, gitsync.ErrFenced) {
			t.Fatalf("A turn 3: %q %v", sha, err)
		}
		if _, err := podA.Sync.Flush(context.Background(), gitsync.FlushOptions{}); !errors.Is(err, gitsync.ErrFenced) {
			t.Fatalf("A flush: %v", err)
		}
		if n := len(messages(logs, "FENCED")); n != 1 {
			t.Fatalf("pod A logged FENCED %d times, want once", n)
		}
		for _, rec := range api.recorded() {
			if rec.Message == "A turn 2" || rec.Message == "A turn 3" {
				t.Fatalf("a fenced commit was recorded: %q", rec.Message)
			}
		}
		// B keeps writing, on top of A's acknowledged turn 1.
		writeFile(t, wsB, "b.txt", "b1")
		if _, err := podB.Turn(context.Background(), "B turn 1"); err != nil {
			t.Fatal(err)
		}
		if podB.Lease.Fenced() {
			t.Fatal("B fenced")
		}
		b, err := os.ReadFile(filepath.Join(wsB, "a.txt"))
		if err != nil || string(b) != "a1" {
			t.Fatalf("B's tree lost A's acknowledged turn: %q %v", b, err)
		}
	})
}
