package hydrate_test

import (
	"context"
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/hydrate/hydratetest"
)

// A project with a manifest is hydrated from base + increments with the
// manifest's refs; a read after a turn downloads that turn's increment
// (and the small manifest), not the archive again.
func TestReadAfterATurnFetchesOnlyTheIncrement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := hydratetest.MinIOStore(t)
	w := hydratetest.NewWork(t)
	w.Generate(50, 20_000, true)
	w.PersistIncrement(st, "prj_inc")
	m, _ := newManager(t, st, nil)
	r, err := m.Acquire(ctx, "prj_inc")
	if err != nil {
		t.Fatal(err)
	}
	r.Release()
	first := m.Stats().BytesFetched
	if first < 500_000 {
		t.Fatalf("first read fetched %d bytes, want the whole archive", first)
	}
	for i, body := range []string{"one\n", "two\n"} {
		sha := w.Commit("turn", map[string]string{"notes.txt": body})
		_, incBytes := w.PersistIncrement(st, "prj_inc")
		before, gets := m.Stats().BytesFetched, st.Gets.Load()
		r, err := m.Acquire(ctx, "prj_inc")
		if err != nil {
			t.Fatal(err)
		}
		if got := revParse(t, r, "HEAD"); got != sha {
			t.Fatalf("turn %d: HEAD %s, want %s", i, got, sha)
		}
		r.Release()
		fetched := m.Stats().BytesFetched - before
		// The manifest and the one new increment: two GETs.
		if fetched != incBytes || st.Gets.Load()-gets != 2 {
			t.Fatalf("turn %d: fetched %d bytes in %d GETs, want the increment's %d in 2", i, fetched, st.Gets.Load()-gets, incBytes)
		}
		t.Logf("read after turn %d fetched %d bytes (first read %d)", i, fetched, first)
	}
}
