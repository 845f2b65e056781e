package checkpointreads_test

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/checkpointreads"
	"github.com/svc-dev/svc/apiserver/internal/hydrate/hydratetest"
	"github.com/svc-dev/svc/apiserver/internal/server/servertest"
	"github.com/svc-dev/svc/shared/objstore"
)

// repoMB is the size of the incompressible history of
// TestGraphAfterATurnFetchesTheChange: SVC_BENCH_REPO_MB (default 2, so
// the suite stays fast; docs/performance.md has the 200 MB figure).
func repoMB(t *testing.T) int {
	if v := os.Getenv("SVC_BENCH_REPO_MB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SVC_BENCH_REPO_MB=%q: want a positive number of MB", v)
		}
		return n
	}
	return 2
}

// The read of checkpoints/graph after a one-line turn, on a project
// persisted as the pod persists it (base + manifest, then an increment
// and the next manifest), fetches from the object store the change — the
// increment and the manifest — not the repository. The bytes are counted
// as the API's object-store client reads them (hydratetest.CountingStore).
func TestGraphAfterATurnFetchesTheChange(t *testing.T) {
	t.Parallel()
	mb := repoMB(t)
	f := &fx{servertest.NewHydrated(t, nil)}
	ctx := context.Background()
	w := hydratetest.NewWork(t)
	w.Generate(4*mb, 256<<10, true) // 256 KiB of random bytes per commit
	w.PersistIncrement(f.Objects, f.Project.ID)
	base, err := f.Objects.Head(ctx, objstore.RepoKey(f.Project.ID))
	if err != nil {
		t.Fatal(err)
	}

	var g checkpointreads.GraphResponse
	before := f.Objects.GotBytes.Load()
	getOK(t, f.url("/checkpoints/graph"), f.Key, &g)
	first := f.Objects.GotBytes.Load() - before
	if g.Head != w.Head() || first < base.Size {
		t.Fatalf("first read: head %s (want %s), fetched %d bytes, want at least the base's %d", g.Head, w.Head(), first, base.Size)
	}

	sha := w.Commit("one-line turn", map[string]string{"notes.txt": "turn 1\n"})
	_, incBytes := w.PersistIncrement(f.Objects, f.Project.ID)
	man, err := f.Objects.Head(ctx, objstore.RepoManifestKey(f.Project.ID))
	if err != nil {
		t.Fatal(err)
	}
	before = f.Objects.GotBytes.Load()
	getOK(t, f.url("/checkpoints/graph"), f.Key, &g)
	fetched := f.Objects.GotBytes.Load() - before
	if g.Head != sha {
		t.Fatalf("read after the turn: head %s, want %s", g.Head, sha)
	}
	// The increment and the manifest, nothing of the base; the slack
	// is for a read that ever adds a small object, never for the base.
	const slack = 4 << 10
	if incBytes == 0 || fetched > incBytes+man.Size+slack {
		t.Fatalf("read after the turn fetched %d bytes, want at most the increment's %d + the manifest's %d + %d",
			fetched, incBytes, man.Size, slack)
	}
	t.Logf("%d MB history (base %d B): first read fetched %d B; read after a one-line turn fetched %d B "+
		"(increment %d B + manifest %d B)", mb, base.Size, first, fetched, incBytes, man.Size)
}
