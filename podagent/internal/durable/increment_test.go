package durable_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/podagent/internal/durable"
	"github.com/svc-dev/svc/podagent/internal/ownership"
	"github.com/svc-dev/svc/shared/archive"
	"github.com/svc-dev/svc/shared/gitrun"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/objstore/fs"
	"github.com/svc-dev/svc/shared/objstore/objstoretest"
	"github.com/svc-dev/svc/shared/repoarchive"
)

// keyClass groups a project's keys for the byte counts.
func keyClass(key string) string {
	switch {
	case strings.HasSuffix(key, "/repo.git.tar.gz"):
		return "base"
	case strings.HasSuffix(key, "/repo.git.manifest.json"):
		return "manifest"
	case strings.Contains(key, "/repo.git.inc/"):
		return "inc"
	}
	return "other"
}

func podWith(t testing.TB, st objstore.Store, workspace, name string, co durable.CompactionOptions, full ...bool) *durable.Persister {
	t.Helper()
	log := zap.NewNop()
	if _, bench := t.(*testing.B); !bench {
		log = zaptest.NewLogger(t).Named(name)
	}
	lease := ownership.New(ownership.Options{Store: st, ProjectID: "p1", Pod: name, Log: log})
	if err := lease.Claim(context.Background()); err != nil {
		t.Fatalf("%s: claim: %v", name, err)
	}
	p := durable.New(durable.Options{Store: st, ProjectID: "p1", Workspace: workspace, Runner: &gitrun.Runner{},
		Log: log, Lease: lease, Compaction: co, Full: len(full) > 0 && full[0]})
	t.Cleanup(p.Close)
	return p
}

// turn appends a line to notes.txt and commits it.
func turn(t testing.TB, ws string, n int) string {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(ws, "notes.txt"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "turn %d\n", n)
	f.Close()
	git(t, ws, "add", "-A")
	git(t, ws, "commit", "-q", "-m", fmt.Sprintf("turn %d", n))
	return git(t, ws, "rev-parse", "HEAD")
}

func newRepo(t testing.TB, ws string, randomBytes int) {
	t.Helper()
	git(t, ws, "init", "-q", "-b", "main")
	b := make([]byte, randomBytes)
	_, _ = rand.Read(b)
	if err := os.WriteFile(filepath.Join(ws, "blob.bin"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readManifest(t *testing.T, st objstore.Store) repoarchive.RepoManifest {
	t.Helper()
	rc, _, err := st.Get(context.Background(), objstore.RepoManifestKey("p1"))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	m, err := repoarchive.ParseRepoManifest(b, "p1")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// After the first persist (the whole base), a one-line turn uploads one
// small increment and the manifest, whatever the repository's size; a pod
// on an empty disk restores base + increments with the refs of the
// manifest and passes fsck.
func TestIncrementalPersistAndRestore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fsStore, err := fs.New(t.TempDir(), fs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := &objstoretest.Counting{Store: fsStore, Class: keyClass}
	wsA := t.TempDir()
	a := podWith(t, st, wsA, "pod-a", durable.CompactionOptions{MaxIncrements: -1, VolumeRatio: -1})
	newRepo(t, wsA, 4<<20)
	turn(t, wsA, 0)
	if _, err := persist(ctx, a); err != nil {
		t.Fatal(err)
	}
	if got := st.Puts()["base"].Bytes; got < 4<<20 {
		t.Fatalf("first persist uploaded %d base bytes, want the whole repository", got)
	}
	var heads []string
	for i := 1; i <= 5; i++ {
		st.Reset()
		heads = append(heads, turn(t, wsA, i))
		git(t, wsA, "tag", fmt.Sprintf("publish/v%d", i))
		if _, err := persist(ctx, a); err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		puts := st.Puts()
		if puts["base"].Requests != 0 || puts["inc"].Requests != 1 || puts["manifest"].Requests != 1 {
			t.Fatalf("turn %d wrote %+v; want one increment and one manifest", i, puts)
		}
		if total := objstoretest.Total(puts); total > 64<<10 {
			t.Fatalf("turn %d uploaded %d bytes, want ≤ 64 KiB", i, total)
		}
		t.Logf("one-line turn %d on a 4 MiB repository uploaded %d bytes (%+v)", i, objstoretest.Total(puts), puts)
	}
	// Nothing changed: nothing is written.
	st.Reset()
	if _, err := persist(ctx, a); err != nil {
		t.Fatal(err)
	}
	if puts := st.Puts(); len(puts) != 0 {
		t.Fatalf("a persist with nothing new wrote %+v", puts)
	}
	m := readManifest(t, st)
	if len(m.Increments) != 5 || m.Refs["refs/heads/main"] != heads[4] || m.Head != "refs/heads/main" || m.Refs["refs/tags/publish/v5"] != heads[4] {
		t.Fatalf("manifest = %+v", m)
	}

	// An empty disk restores all of it.
	wsB := t.TempDir()
	b := podWith(t, st, wsB, "pod-b", durable.CompactionOptions{})
	if restored, err := b.Restore(ctx, archive.ExtractOptions{}); err != nil || !restored {
		t.Fatalf("restore = %v, %v", restored, err)
	}
	if got := git(t, wsB, "rev-parse", "HEAD"); got != heads[4] {
		t.Fatalf("restored HEAD %s, want %s", got, heads[4])
	}
	git(t, wsB, "fsck", "--full", "--strict", "--no-dangling")
	if got := git(t, wsB, "rev-list", "--count", "HEAD"); got != "6" {
		t.Fatalf("restored history has %s commits, want 6", got)
	}
	// B goes on with increments of its own epoch.
	turn(t, wsB, 6)
	git(t, wsB, "reset", "-q", "--hard")
	if _, err := persist(ctx, b); err != nil {
		t.Fatal(err)
	}
	m = readManifest(t, st)
	if last := m.Increments[len(m.Increments)-1]; last.Epoch != 2 || !strings.Contains(last.Key, "/0000000002-") {
		t.Fatalf("B's increment %+v does not carry its epoch", last)
	}
}

// A compaction rewrites the base from the manifest's refs, drops the
// increments it covers and, as the owner and after the grace period,
// deletes them and orphan increments; restore still gives every turn. A
// pod that lost the project cannot compact over the owner's base.
func TestCompactionAndFencedCompaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := fs.New(t.TempDir(), fs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	wsA := t.TempDir()
	a := podWith(t, st, wsA, "pod-a", durable.CompactionOptions{MaxIncrements: -1, VolumeRatio: -1, RetireGrace: time.Nanosecond})
	newRepo(t, wsA, 64<<10)
	turn(t, wsA, 0)
	if _, err := persist(ctx, a); err != nil {
		t.Fatal(err)
	}
	var head string
	for i := 1; i <= 4; i++ {
		head = turn(t, wsA, i)
		if _, err := persist(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	// An orphan: an increment no manifest names (a crash before the manifest).
	orphan := objstore.RepoIncrementKey("p1", 1, 99, strings.Repeat("a", 40))
	if _, err := st.Put(ctx, orphan, bytes.NewReader([]byte("x")), 1, objstore.PutOptions{IfNoneMatch: "*"}); err != nil {
		t.Fatal(err)
	}
	before := readManifest(t, st)
	if err := a.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	after := readManifest(t, st)
	if len(after.Increments) != 0 || after.Base.Seq != before.Seq || after.Seq != before.Seq+1 || after.Refs["refs/heads/main"] != head {
		t.Fatalf("after compaction: %+v (before %+v)", after, before)
	}
	var left []string
	_ = st.List(ctx, objstore.RepoIncrementPrefix("p1"), func(oi objstore.ObjectInfo) error { left = append(left, oi.Key); return nil })
	if len(left) != 0 {
		t.Fatalf("increments left after the owner's collection: %v", left)
	}
	baseInfo, err := st.Head(ctx, objstore.RepoKey("p1"))
	if err != nil || baseInfo.ETag != after.Base.ETag {
		t.Fatalf("base %+v, %v; manifest names %s", baseInfo, err, after.Base.ETag)
	}
	// The compacted base alone (what any restore can read) holds HEAD.
	wsB := t.TempDir()
	b := podWith(t, st, wsB, "pod-b", durable.CompactionOptions{MaxIncrements: -1, VolumeRatio: -1})
	if restored, err := b.Restore(ctx, archive.ExtractOptions{}); err != nil || !restored {
		t.Fatalf("restore = %v, %v", restored, err)
	}
	if got := git(t, wsB, "rev-parse", "HEAD"); got != head {
		t.Fatalf("restored HEAD %s, want %s", got, head)
	}
	git(t, wsB, "fsck", "--full", "--strict", "--no-dangling")
	// B now owns the project; A, fenced, cannot replace B's base.
	turn(t, wsB, 5)
	if _, err := persist(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := b.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	winner, _ := st.Head(ctx, objstore.RepoKey("p1"))
	if err := a.Compact(ctx); !errors.Is(err, durable.ErrFenced) {
		t.Fatalf("a fenced pod's compaction = %v, want ErrFenced", err)
	}
	if now, _ := st.Head(ctx, objstore.RepoKey("p1")); now.ETag != winner.ETag {
		t.Fatalf("the fenced pod's compaction replaced the owner's base")
	}
}

// A legacy project (a base, no manifest) restores from the base and gets
// its manifest at the first persist; a manifest of a newer format is
// refused with a clear error instead of restoring the lagging base.
func TestLegacyAndNewerManifest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := fs.New(t.TempDir(), fs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	newRepo(t, ws, 1024)
	head := turn(t, ws, 0)
	var buf bytes.Buffer
	if _, err := repoarchive.Create(&buf, filepath.Join(ws, ".git"), repoarchive.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, objstore.RepoKey("p1"), &buf, int64(buf.Len()), objstore.PutOptions{IfNoneMatch: "*"}); err != nil {
		t.Fatal(err)
	}
	wsB := t.TempDir()
	b := podWith(t, st, wsB, "pod-b", durable.CompactionOptions{})
	if restored, err := b.Restore(ctx, archive.ExtractOptions{}); err != nil || !restored {
		t.Fatalf("legacy restore = %v, %v", restored, err)
	}
	if _, ok := b.Manifest(); ok {
		t.Fatal("a legacy restore reports a manifest")
	}
	git(t, wsB, "reset", "-q", "--hard")
	head2 := turn(t, wsB, 1)
	if _, err := persist(ctx, b); err != nil {
		t.Fatal(err)
	}
	m := readManifest(t, st)
	if m.Refs["refs/heads/main"] != head2 || len(m.Increments) != 0 || m.Base.ETag == "" {
		t.Fatalf("first manifest of a legacy project: %+v (seed %s)", m, head)
	}
	// A newer format.
	m.Version = repoarchive.RepoManifestVersion + 1
	if _, err := st.Put(ctx, objstore.RepoManifestKey("p1"), bytes.NewReader(m.Marshal()), -1, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	c := podWith(t, st, t.TempDir(), "pod-c", durable.CompactionOptions{})
	if _, err := c.Restore(ctx, archive.ExtractOptions{}); !errors.Is(err, repoarchive.ErrManifestVersion) {
		t.Fatalf("restore of a newer manifest = %v, want ErrManifestVersion", err)
	}
}

// Many small increments are merged into one without rewriting the base;
// the merged chain restores every turn.
func TestMergeIncrements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fsStore, err := fs.New(t.TempDir(), fs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := &objstoretest.Counting{Store: fsStore, Class: keyClass}
	ws := t.TempDir()
	a := podWith(t, st, ws, "pod-a", durable.CompactionOptions{MaxIncrements: -1, VolumeRatio: -1, RetireGrace: time.Nanosecond})
	newRepo(t, ws, 256<<10)
	turn(t, ws, 0)
	if _, err := persist(ctx, a); err != nil {
		t.Fatal(err)
	}
	var head string
	for i := 1; i <= 4; i++ {
		head = turn(t, ws, i)
		if _, err := persist(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Merge(ctx); err != nil {
		t.Fatal(err)
	}
	m := readManifest(t, st)
	var stored []string
	_ = st.List(ctx, objstore.RepoIncrementPrefix("p1"), func(oi objstore.ObjectInfo) error { stored = append(stored, oi.Key); return nil })
	if len(m.Increments) != 1 || len(m.Retired) != 4 || len(stored) != 1 || stored[0] != m.Increments[0].Key {
		t.Fatalf("after the merge: increments %v, retired %v, stored %v", m.Increments, m.Retired, stored)
	}
	if st.Puts()["base"].Requests != 1 {
		t.Fatalf("the merge rewrote the base: %+v", st.Puts())
	}
	b := podWith(t, st, t.TempDir(), "pod-b", durable.CompactionOptions{})
	if ok, err := b.Restore(ctx, archive.ExtractOptions{}); err != nil || !ok {
		t.Fatalf("restore: %v %v", ok, err)
	}
	if got, _ := b.Manifest(); got.Refs["refs/heads/main"] != head {
		t.Fatalf("restored manifest head %s, want %s", got.Refs["refs/heads/main"], head)
	}
}
