package hydrate_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/apiserver/internal/hydrate"
	"github.com/svc-dev/svc/apiserver/internal/hydrate/hydratetest"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/shared/archive"
	"github.com/svc-dev/svc/shared/gitrun"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/wire"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func newManager(t testing.TB, st objstore.Store, mod func(*hydrate.Options)) (*hydrate.Manager, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "hydrated")
	return hydratetest.NewManager(t, hydrate.Options{Store: st, Dir: dir, Log: zaptest.NewLogger(t)}, mod), dir
}

// persistOne puts a one-commit repository (a.txt) of project in st and
// returns its work tree and the commit.
func persistOne(t *testing.T, st objstore.Store, project string) (*hydratetest.Work, string) {
	t.Helper()
	w := hydratetest.NewWork(t)
	head := w.Commit("first", map[string]string{"a.txt": "a\n"})
	w.Persist(st, project)
	return w, head
}

func revParse(t *testing.T, r *hydrate.Repo, rev string) string {
	t.Helper()
	out, err := r.Git("rev-parse", "--verify").AddDynamic(rev).String(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestETagCacheDownloadsOnlyOnChange(t *testing.T) {
	t.Parallel()
	st := hydratetest.MinIOStore(t)
	w, first := persistOne(t, st, "prj_cache")
	m, _ := newManager(t, st, nil)

	const n = 10
	for i := 0; i < n; i++ {
		r, err := m.Acquire(context.Background(), "prj_cache")
		if err != nil {
			t.Fatal(err)
		}
		if got := revParse(t, r, "HEAD"); got != first {
			t.Fatalf("HEAD = %s, want %s", got, first)
		}
		r.Release()
	}
	// A legacy object (no manifest): each probe asks for the manifest, then
	// the archive.
	if st.Gets.Load() != 1 || st.Heads.Load() != 2*n {
		t.Fatalf("after %d reads of an unchanged object: %d downloads and %d probes, want 1 and %d", n, st.Gets.Load(), st.Heads.Load(), 2*n)
	}

	second := w.Commit("second", map[string]string{"b.txt": "b\n"})
	w.Persist(st, "prj_cache")
	r, err := m.Acquire(context.Background(), "prj_cache")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	if got := revParse(t, r, "HEAD"); got != second {
		t.Fatalf("HEAD after a new object = %s, want %s", got, second)
	}
	if st.Gets.Load() != 2 {
		t.Fatalf("downloads = %d, want 2", st.Gets.Load())
	}
	if r.Stale {
		t.Fatal("fresh copy flagged stale")
	}
}

func TestConcurrentFirstReadsShareOneDownload(t *testing.T) {
	t.Parallel()
	st := hydratetest.MinIOStore(t)
	persistOne(t, st, "prj_sf")
	release := make(chan struct{})
	st.BeforeGet = func() { <-release }
	m, _ := newManager(t, st, nil)

	const n = 8
	var started, done sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		started.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			started.Done()
			r, err := m.Acquire(context.Background(), "prj_sf")
			if err != nil {
				errs <- err
				return
			}
			r.Release()
		}()
	}
	started.Wait()
	close(release)
	done.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if st.Gets.Load() != 1 {
		t.Fatalf("%d concurrent first reads made %d downloads, want 1", n, st.Gets.Load())
	}
}

// TestReadersDuringSwapSeeWholeRepos persists new versions while readers
// read: every read sees a complete repository whose HEAD is one of the
// persisted heads with its full history, and an old copy held by a reader
// stays usable until released, then is removed.
func TestReadersDuringSwapSeeWholeRepos(t *testing.T) {
	t.Parallel()
	st := hydratetest.MinIOStore(t)
	w := hydratetest.NewWork(t)
	w.Generate(20, 200, false)
	counts := sync.Map{} // head sha → commit count
	counts.Store(w.Head(), 20)
	w.Persist(st, "prj_swap")
	m, dir := newManager(t, st, nil)

	held, err := m.Acquire(context.Background(), "prj_swap")
	if err != nil {
		t.Fatal(err)
	}
	heldHead := revParse(t, held, "HEAD")

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				r, err := m.Acquire(context.Background(), "prj_swap")
				if err != nil {
					errc <- err
					return
				}
				out, err := r.Git("log", "--format=%H").String(context.Background())
				r.Release()
				if err != nil {
					errc <- err
					return
				}
				shas := strings.Fields(out)
				want, ok := counts.Load(shas[0])
				if !ok || want.(int) != len(shas) {
					errc <- errors.New("read a partial or unknown repository: head " + shas[0] + " with " + strconv.Itoa(len(shas)) + " commits")
					return
				}
			}
		})
	}
	total := 20
	for v := 0; v < 5; v++ {
		w.Generate(10, 200, false)
		total += 10
		counts.Store(w.Head(), total)
		w.Persist(st, "prj_swap")
		r, err := m.Acquire(context.Background(), "prj_swap")
		if err != nil {
			t.Fatal(err)
		}
		if got := revParse(t, r, "HEAD"); got != w.Head() {
			t.Fatalf("HEAD = %s, want %s", got, w.Head())
		}
		r.Release()
	}
	cancel()
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}

	// The held copy was retired by the swaps but is still whole.
	if got := revParse(t, held, "HEAD"); got != heldHead {
		t.Fatalf("held copy changed under its reader: %s", got)
	}
	heldDir := held.GitDir
	held.Release()
	m.Wait()
	if _, err := os.Stat(heldDir); !os.IsNotExist(err) {
		t.Fatalf("retired copy %s not removed after its last reader: %v", heldDir, err)
	}
	versions, _ := os.ReadDir(filepath.Join(dir, "prj_swap"))
	if len(versions) != 1 {
		t.Fatalf("%d version dirs left, want 1", len(versions))
	}
}

func TestMissingObjectIsNotFound(t *testing.T) {
	t.Parallel()
	st := hydratetest.MinIOStore(t)
	m, _ := newManager(t, st, nil)
	_, err := m.Acquire(context.Background(), "prj_missing")
	if !errors.Is(err, hydrate.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	var ae *wire.Error
	if !errors.As(hydrate.APIError(err), &ae) || ae.Status != http.StatusNotFound || ae.Code != hydrate.CodeNotFound {
		t.Fatalf("APIError = %+v", hydrate.APIError(err))
	}
	if _, err := m.Acquire(context.Background(), "../etc"); !errors.Is(err, hydrate.ErrInvalidProject) {
		t.Fatalf("bad project id: err = %v", err)
	}
}

func TestCorruptObjectKeepsLastGoodCopy(t *testing.T) {
	t.Parallel()
	st := hydratetest.MinIOStore(t)
	w, good := persistOne(t, st, "prj_corrupt")
	m, _ := newManager(t, st, nil)
	r, err := m.Acquire(context.Background(), "prj_corrupt")
	if err != nil {
		t.Fatal(err)
	}
	r.Release()

	hydratetest.PutObject(t, st, "prj_corrupt", []byte("this is not gzip"))
	for i := 0; i < 3; i++ {
		r, err := m.Acquire(context.Background(), "prj_corrupt")
		if err != nil {
			t.Fatalf("read %d: %v, want the last good copy", i, err)
		}
		if !r.Stale || !errors.Is(r.StaleErr, hydrate.ErrCorrupt) {
			t.Fatalf("read %d: stale=%v err=%v, want stale with ErrCorrupt", i, r.Stale, r.StaleErr)
		}
		if got := revParse(t, r, "HEAD"); got != good {
			t.Fatalf("stale HEAD = %s, want %s", got, good)
		}
		h := http.Header{}
		hydrate.SetHeaders(h, r)
		if h.Get(hydrate.HeaderStale) != "true" || h.Get(hydrate.HeaderError) != hydrate.CodeCorrupt {
			t.Fatalf("headers = %v", h)
		}
		r.Release()
	}
	if st.Gets.Load() != 2 {
		t.Fatalf("downloads = %d, want 2 (a corrupt ETag is not fetched again)", st.Gets.Load())
	}

	// A new good object heals.
	healed := w.Commit("healed", map[string]string{"b.txt": "b\n"})
	w.Persist(st, "prj_corrupt")
	r, err = m.Acquire(context.Background(), "prj_corrupt")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	if r.Stale || revParse(t, r, "HEAD") != healed {
		t.Fatalf("not healed: stale=%v", r.Stale)
	}

	// Without an earlier copy a corrupt object is a clear 502.
	hydratetest.PutObject(t, st, "prj_corrupt_new", []byte("garbage"))
	_, err = m.Acquire(context.Background(), "prj_corrupt_new")
	var ae *wire.Error
	if !errors.Is(err, hydrate.ErrCorrupt) || !errors.As(hydrate.APIError(err), &ae) || ae.Status != http.StatusBadGateway || ae.Code != hydrate.CodeCorrupt {
		t.Fatalf("err = %v", err)
	}
}

// failingStore fails every call while down.
type failingStore struct {
	objstore.Store
	mu   sync.Mutex
	down bool
}

func (f *failingStore) setDown(v bool) { f.mu.Lock(); f.down = v; f.mu.Unlock() }
func (f *failingStore) isDown() bool   { f.mu.Lock(); defer f.mu.Unlock(); return f.down }
func (f *failingStore) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	if f.isDown() {
		return objstore.ObjectInfo{}, errors.New("connection refused")
	}
	return f.Store.Head(ctx, key)
}

func TestStorageDownServesStaleCopy(t *testing.T) {
	t.Parallel()
	st := &failingStore{Store: hydratetest.MinIOStore(t)}
	persistOne(t, st, "prj_down")
	m, _ := newManager(t, st, nil)

	st.setDown(true)
	_, err := m.Acquire(context.Background(), "prj_down")
	var ae *wire.Error
	if !errors.Is(err, hydrate.ErrUnavailable) || !errors.As(hydrate.APIError(err), &ae) || ae.Status != http.StatusServiceUnavailable {
		t.Fatalf("no copy, storage down: err = %v", err)
	}
	st.setDown(false)
	r, err := m.Acquire(context.Background(), "prj_down")
	if err != nil {
		t.Fatal(err)
	}
	r.Release()
	st.setDown(true)
	r, err = m.Acquire(context.Background(), "prj_down")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	if !r.Stale || hydrate.ErrorCode(r.StaleErr) != hydrate.CodeUnavailable {
		t.Fatalf("stale=%v err=%v", r.Stale, r.StaleErr)
	}
}

// tarGz builds an archive from raw entries.
func tarGz(t *testing.T, entries []tar.Header, content map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, h := range entries {
		h := h
		body := content[h.Name]
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if body != "" {
			if _, err := tw.Write([]byte(body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestHostileArchiveRefused(t *testing.T) {
	t.Parallel()
	st := hydratetest.MinIOStore(t)
	m, dir := newManager(t, st, nil)
	outside := filepath.Dir(dir)
	cases := map[string][]tar.Header{
		"dotdot":         {{Name: "HEAD", Typeflag: tar.TypeReg}, {Name: "../escaped", Typeflag: tar.TypeReg}},
		"absolute":       {{Name: "/tmp/svc-hydrate-escaped", Typeflag: tar.TypeReg}},
		"symlink-out":    {{Name: "objects", Typeflag: tar.TypeSymlink, Linkname: "../../../.."}},
		"symlink-abs":    {{Name: "refs", Typeflag: tar.TypeSymlink, Linkname: "/etc"}},
		"device":         {{Name: "dev", Typeflag: tar.TypeChar}},
		"not-a-repo":     {{Name: "README", Typeflag: tar.TypeReg}},
		"head-no-commit": {{Name: "HEAD", Typeflag: tar.TypeReg}, {Name: "objects/", Typeflag: tar.TypeDir}, {Name: "refs/heads/main", Typeflag: tar.TypeReg}},
	}
	content := map[string]string{"HEAD": "ref: refs/heads/main\n", "../escaped": "x", "/tmp/svc-hydrate-escaped": "x",
		"README": "hi", "refs/heads/main": "0123456789012345678901234567890123456789\n"}
	for name, entries := range cases {
		t.Run(name, func(t *testing.T) {
			pid := "prj_hostile_" + strings.ReplaceAll(name, "-", "_")
			hydratetest.PutObject(t, st, pid, tarGz(t, entries, content))
			_, err := m.Acquire(context.Background(), pid)
			if !errors.Is(err, hydrate.ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
			if strings.HasPrefix(name, "dotdot") || strings.HasPrefix(name, "symlink") || name == "absolute" || name == "device" {
				if !errors.Is(err, archive.ErrUnsafeEntry) {
					t.Fatalf("err = %v, want archive.ErrUnsafeEntry", err)
				}
			}
		})
	}
	if _, err := os.Stat(filepath.Join(outside, "escaped")); !os.IsNotExist(err) {
		t.Fatal("an entry escaped the target")
	}
	if _, err := os.Stat("/tmp/svc-hydrate-escaped"); !os.IsNotExist(err) {
		t.Fatal("an absolute entry was written")
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, ".staging")); len(entries) != 0 {
		t.Fatalf("staging left behind: %v", entries)
	}
}

// TestArchiveConfigIsNotTrusted: a pod-written config cannot name a diff
// driver, hook path or alternates that the API would act on.
func TestArchiveConfigIsNotTrusted(t *testing.T) {
	t.Parallel()
	st := hydratetest.MinIOStore(t)
	w := hydratetest.NewWork(t)
	w.Commit("one", map[string]string{"a.txt": "a\n"})
	marker := filepath.Join(t.TempDir(), "pwned")
	w.Git("config", "--local", "diff.external", "sh -c 'touch "+marker+"'")
	w.Git("config", "--local", "core.hooksPath", "/tmp")
	testenv.Must(t, os.WriteFile(filepath.Join(w.GitDir(), "objects", "info", "alternates"), []byte("/nonexistent/objects\n"), 0o644))
	testenv.Must(t, os.MkdirAll(filepath.Join(w.GitDir(), "hooks"), 0o755))
	w.Persist(st, "prj_cfg")
	m, _ := newManager(t, st, nil)
	r, err := m.Acquire(context.Background(), "prj_cfg")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	cfg, _ := os.ReadFile(filepath.Join(r.GitDir, "config"))
	if strings.Contains(string(cfg), "external") || strings.Contains(string(cfg), "hooksPath") || !strings.Contains(string(cfg), "bare = true") {
		t.Fatalf("config not replaced:\n%s", cfg)
	}
	for _, rel := range []string{"objects/info/alternates", "hooks"} {
		if _, err := os.Stat(filepath.Join(r.GitDir, rel)); !os.IsNotExist(err) {
			t.Fatalf("%s kept", rel)
		}
	}
	if _, err := r.Git("log", "-p").Output(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatal("the archive's diff.external ran")
	}
}

func TestDiskBudgetEvictsLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	st := hydratetest.MinIOStore(t)
	for _, pid := range []string{"prj_a", "prj_b", "prj_c"} {
		w := hydratetest.NewWork(t)
		w.Generate(5, 20_000, true)
		w.Persist(st, pid)
	}
	// Budget for about two copies.
	probe, _ := newManager(t, st, nil)
	r, err := probe.Acquire(context.Background(), "prj_a")
	testenv.Must(t, err)
	r.Release()
	one := probe.DiskUsage()

	m, dir := newManager(t, st, func(o *hydrate.Options) { o.DiskBudget = 2*one + one/2 })
	for _, pid := range []string{"prj_a", "prj_b", "prj_a", "prj_c"} {
		r, err := m.Acquire(context.Background(), pid)
		testenv.Must(t, err)
		r.Release()
	}
	m.Wait()
	if got := m.Stats().Evictions; got != 1 {
		t.Fatalf("evictions = %d, want 1", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "prj_b")); !os.IsNotExist(err) {
		t.Fatal("the least recently used copy (prj_b) was not evicted")
	}
	for _, pid := range []string{"prj_a", "prj_c"} {
		if _, err := os.Stat(filepath.Join(dir, pid)); err != nil {
			t.Fatalf("%s evicted: %v", pid, err)
		}
	}
	if m.DiskUsage() > 2*one+one/2 {
		t.Fatalf("usage %d over budget", m.DiskUsage())
	}
}

func TestHydrateReconcilesMissingRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.Postgres(t)
	proj := storetest.Projects(t, db, "p")[0]

	st := hydratetest.MinIOStore(t)
	w := hydratetest.NewWork(t)
	c1 := w.Commit("one", map[string]string{"a.txt": "1\n2\n"})
	c2 := w.Commit("two", map[string]string{"a.txt": "1\n", "b.txt": "b\n"})
	c3 := w.Commit("three", map[string]string{"c.txt": "c\n"})
	w.Tag("publish/demo/1700000000", "publish")
	w.Persist(st, proj.ID)
	// The pod recorded c1 and c3; the POST for c2 was lost.
	rec, err := hydrateRecord(t, w, c1)
	testenv.Must(t, err)
	_, _, err = db.RecordCheckpoint(ctx, proj.ID, rec, store.SourcePod)
	testenv.Must(t, err)
	rec, err = hydrateRecord(t, w, c3)
	testenv.Must(t, err)
	_, _, err = db.RecordCheckpoint(ctx, proj.ID, rec, store.SourcePod)
	testenv.Must(t, err)

	m, _ := newManager(t, st, func(o *hydrate.Options) { o.Checkpoints = db })
	r, err := m.Acquire(ctx, proj.ID)
	testenv.Must(t, err)
	r.Release()
	cps, err := db.ListCheckpoints(ctx, proj.ID, 10)
	testenv.Must(t, err)
	if len(cps) != 3 {
		t.Fatalf("%d rows, want 3", len(cps))
	}
	var got *store.Checkpoint
	for i := range cps {
		if cps[i].CommitSHA == c2 {
			got = &cps[i]
		}
	}
	if got == nil || !got.Reconciled || got.Source != store.SourceReconcile || got.ParentSHA != c1 ||
		got.Message != "two" || got.Branch != "main" || got.FilesChanged != 2 || got.Additions != 1 || got.Deletions != 1 {
		t.Fatalf("reconciled row = %+v", got)
	}
	if m.Stats().Reconciled != 1 {
		t.Fatalf("reconciled = %d", m.Stats().Reconciled)
	}
	// A second read (unchanged ETag) writes nothing.
	r, err = m.Acquire(ctx, proj.ID)
	testenv.Must(t, err)
	r.Release()
	if n, _ := db.ListCheckpoints(ctx, proj.ID, 10); len(n) != 3 || m.Stats().Reconciled != 1 {
		t.Fatalf("second read changed rows")
	}
}

// Rows are turns only (docs/sync-modes.md §1): the seed commit gets none; a durable .git carrying a
// side ref (as micro-VM exports do) and a tag on commits off the branch's
// first-parent line gets rows for the line's commits alone, and rows an
// older reconcile wrote for those side commits are removed; a row for a
// commit the copy does not hold (a newer turn) stays.
func TestReconcileWritesRowsOnlyForTurns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.Postgres(t)
	proj := storetest.Projects(t, db, "p")[0]

	st := hydratetest.MinIOStore(t)
	w := hydratetest.NewWork(t)
	c0 := w.Commit("seed", map[string]string{"a.txt": "0\n"})
	c1 := w.Commit("turn one", map[string]string{"a.txt": "1\n"})
	tree := w.Git("rev-parse", c1+"^{tree}")
	side := w.Git("commit-tree", tree, "-p", c0, "-m", "pre-hydrate snapshot")
	w.Git("update-ref", "refs/shogo-neutral/pre-hydrate/1700000000", side)
	tagged := w.Git("commit-tree", tree, "-p", side, "-m", "tagged only")
	w.Git("tag", "-a", "-m", "release", "only-a-tag", tagged)
	c2 := w.Commit("turn two", map[string]string{"b.txt": "b\n"})
	w.Persist(st, proj.ID)

	// Rows an older reconcile (rev-list --all) wrote for the side commits,
	// and the row of a turn newer than this copy.
	newer := strings.Repeat("e", 40)
	for _, sha := range []string{side, tagged, newer} {
		_, _, err := db.RecordCheckpoint(ctx, proj.ID, wire.CheckpointRecord{CommitSHA: sha, Turn: -1}, store.SourceReconcile)
		testenv.Must(t, err)
	}

	m, _ := newManager(t, st, func(o *hydrate.Options) { o.Checkpoints = db })
	r, err := m.Acquire(ctx, proj.ID)
	testenv.Must(t, err)
	r.Release()
	cps, err := db.ListCheckpoints(ctx, proj.ID, 100)
	testenv.Must(t, err)
	got := map[string]int64{}
	for _, cp := range cps {
		turn := int64(-1)
		if cp.Turn != nil {
			turn = *cp.Turn
		}
		got[cp.CommitSHA] = turn
	}
	want := map[string]int64{c1: 1, c2: 2, newer: -1} // the seed c0 is not a turn
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("rows (sha → turn) %v, want %v (side %s, tagged %s)", got, want, side, tagged)
	}
}

func hydrateRecord(t *testing.T, w *hydratetest.Work, sha string) (wire.CheckpointRecord, error) {
	t.Helper()
	r := &gitrun.Runner{}
	recs, err := hydrate.CommitRecords(context.Background(), func(args ...gitrun.Arg) *gitrun.Cmd {
		return r.Command(args...).Dir(w.Dir)
	}, []string{sha})
	if err != nil {
		return wire.CheckpointRecord{}, err
	}
	recs[0].Branch = "main"
	return recs[0], nil
}

// BenchmarkRehydrate20MB measures one re-hydration of a ~20 MB .git after
// its object changed: HEAD probe, download from MinIO, safe extraction,
// sanitising and the commit-graph, then the swap. (Uploading the new
// object is outside the timer; reconcile is off: it is a database cost.)
func BenchmarkRehydrate20MB(b *testing.B) {
	st := hydratetest.MinIOStore(b)
	w := hydratetest.NewWork(b)
	w.Generate(100, 200_000, true)
	a1 := w.Archive()
	w.Commit("one more", map[string]string{"more.txt": "more\n"})
	a2 := w.Archive()
	m, _ := newManager(b, st, func(o *hydrate.Options) { o.Log = nil })
	archives := [][]byte{a1, a2}
	b.SetBytes(int64(len(a1)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		hydratetest.PutObject(b, st, "prj_bench", archives[i%2])
		b.StartTimer()
		r, err := m.Acquire(context.Background(), "prj_bench")
		if err != nil {
			b.Fatal(err)
		}
		r.Release()
	}
	b.StopTimer()
	b.ReportMetric(float64(len(a1))/(1<<20), "object-MiB")
	if got := m.Stats().Downloads; got != int64(b.N) {
		b.Fatalf("downloads = %d, want %d", got, b.N)
	}
}

// BenchmarkAcquireUnchanged is the cost a read pays for freshness when the
// object did not change: one HEAD probe to MinIO.
func BenchmarkAcquireUnchanged(b *testing.B) {
	st := hydratetest.MinIOStore(b)
	w := hydratetest.NewWork(b)
	w.Generate(1000, 200, false)
	w.Persist(st, "prj_bench")
	m, _ := newManager(b, st, func(o *hydrate.Options) { o.Log = nil })
	for b.Loop() {
		r, err := m.Acquire(context.Background(), "prj_bench")
		if err != nil {
			b.Fatal(err)
		}
		r.Release()
	}
	if m.Stats().Downloads != 1 {
		b.Fatalf("downloads = %d", m.Stats().Downloads)
	}
}
