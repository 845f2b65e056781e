package s3sync

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/svc-dev/svc/podagent/internal/ownership"
	"github.com/svc-dev/svc/shared/archive"
	"github.com/svc-dev/svc/shared/objstore"
	fsstore "github.com/svc-dev/svc/shared/objstore/fs"
	"github.com/svc-dev/svc/shared/testenv/testfile"
)

func newSync(t *testing.T) (*S3Sync, *ownership.Lease, objstore.Store, string) {
	t.Helper()
	store, err := fsstore.New(t.TempDir(), fsstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	lease := ownership.New(ownership.Options{Store: store, ProjectID: "p1"})
	s := New(lease, Options{Store: store, ProjectID: "p1", Workspace: ws, TempDir: t.TempDir(), SuppressProjectArchive: true})
	t.Cleanup(s.Close)
	return s, lease, store, ws
}

func write(t *testing.T, dir, rel, body string) {
	t.Helper()
	testfile.Write(t, filepath.Join(dir, rel), body)
}

// TestDepsUploadInBackground: a turn only starts the deps upload; it
// eventually exists under the key of the lockfile, a second lockfile gets
// its own layer, EnsureDeps (git-flush, shutdown) leaves it in place, and a
// fenced pod uploads nothing.
func TestDepsUploadInBackground(t *testing.T) {
	t.Parallel()
	s, lease, store, ws := newSync(t)
	ctx := context.Background()
	write(t, ws, "package-lock.json", `{"v":1}`)
	write(t, ws, "node_modules/a/index.js", "a")
	if err := s.AfterTurn(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitDeps(ctx); err != nil {
		t.Fatal(err)
	}
	h1, _ := s.LockfileHash()
	if _, err := store.Head(ctx, objstore.DepsKeyZstd(h1)); err != nil {
		t.Fatalf("deps layer of the first lockfile: %v", err)
	}

	write(t, ws, "package-lock.json", `{"v":2}`)
	write(t, ws, "node_modules/b/index.js", "b")
	s.SyncDepsInBackground()
	if err := s.EnsureDeps(ctx); err != nil {
		t.Fatal(err)
	}
	h2, _ := s.LockfileHash()
	rc, _, err := store.Get(ctx, objstore.DepsKeyZstd(h2))
	if err != nil {
		t.Fatalf("deps layer of the second lockfile: %v", err)
	}
	dst := t.TempDir()
	_, err = ExtractTarZstd(rc, dst, archive.ExtractOptions{})
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "node_modules/b/index.js")); err != nil || string(b) != "b" {
		t.Fatalf("second layer content: %q %v", b, err)
	}

	_ = lease.Fence("another pod owns the project")
	write(t, ws, "package-lock.json", `{"v":3}`)
	if err := s.AfterTurn(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureDeps(ctx); err != nil {
		t.Fatal(err)
	}
	h3, _ := s.LockfileHash()
	if _, err := store.Head(ctx, objstore.DepsKeyZstd(h3)); !errors.Is(err, objstore.ErrNotExist) {
		t.Fatalf("a fenced pod uploaded a deps layer: %v", err)
	}
}

// TestDepsNotUploadedWhenLockfileChangesMidArchive: the layer is keyed by
// the lockfile, so an archive made while the lockfile changed is dropped.
func TestDepsNotUploadedWhenLockfileChangesMidArchive(t *testing.T) {
	t.Parallel()
	s, _, store, ws := newSync(t)
	write(t, ws, "package-lock.json", `{"v":1}`)
	write(t, ws, "node_modules/a/index.js", "a")
	h1, _ := s.LockfileHash()
	key := objstore.DepsKeyZstd(h1)
	err := s.uploadIf(context.Background(), key, filepath.Join(ws, DepsDir), archive.CreateOptions{Prefix: DepsDir + "/"},
		objstore.PutOptions{IfNoneMatch: "*"}, func() error {
			write(t, ws, "package-lock.json", `{"v":2}`) // an install finished meanwhile
			if now, _ := s.LockfileHash(); now != h1 {
				return errDepsChanged
			}
			return nil
		})
	if !errors.Is(err, errDepsChanged) {
		t.Fatalf("uploadIf = %v", err)
	}
	if _, err := store.Head(context.Background(), key); !errors.Is(err, objstore.ErrNotExist) {
		t.Fatalf("a layer archived during a lockfile change was uploaded: %v", err)
	}
}

// TestExtractTap: the tapped entry reaches Fn before the entries after it
// are written, and is not extracted; an oversized tapped entry is refused.
func TestExtractTap(t *testing.T) {
	t.Parallel()
	archiveBytes := tarGz(t, []entry{{name: "manifest.json", body: `{"x":1}`}, {name: "objects/aa/bb", body: "obj"}, {name: "HEAD", body: "ref"}})
	dst := filepath.Join(t.TempDir(), "x")
	var got []byte
	var headExisted bool
	_, err := ExtractTarGzTap(bytes.NewReader(archiveBytes), dst, archive.ExtractOptions{}, &Tap{Name: "manifest.json", Fn: func(b []byte) {
		got = b
		_, err := os.Stat(filepath.Join(dst, "HEAD"))
		headExisted = err == nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != `{"x":1}` || headExisted {
		t.Fatalf("tap got %q (HEAD already extracted: %v)", got, headExisted)
	}
	if _, err := os.Stat(filepath.Join(dst, "manifest.json")); !os.IsNotExist(err) {
		t.Fatalf("the tapped entry was extracted: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "objects/aa/bb")); err != nil || string(b) != "obj" {
		t.Fatalf("objects/aa/bb: %q %v", b, err)
	}
	big := tarGz(t, []entry{{name: "manifest.json", body: string(make([]byte, maxTapBytes+1))}})
	_, err = ExtractTarGzTap(bytes.NewReader(big), t.TempDir(), archive.ExtractOptions{}, &Tap{Name: "manifest.json", Fn: func([]byte) {}})
	if !errors.Is(err, archive.ErrUnsafeEntry) {
		t.Fatalf("oversized tap entry: %v", err)
	}
}

// TestDepsGzipLayerStillRead: a layer written before zstd (deps-<hash>.tar.gz)
// is restored, and counts as present (no zstd copy is uploaded).
func TestDepsGzipLayerStillRead(t *testing.T) {
	t.Parallel()
	s, _, store, ws := newSync(t)
	ctx := context.Background()
	src := t.TempDir()
	write(t, src, "node_modules/old/index.js", "old layer")
	var buf bytes.Buffer
	if _, err := archive.CreateTarGz(&buf, filepath.Join(src, DepsDir), archive.CreateOptions{Prefix: DepsDir + "/"}); err != nil {
		t.Fatal(err)
	}
	write(t, ws, "package-lock.json", `{"old":true}`)
	hash, _ := s.LockfileHash()
	if _, err := store.Put(ctx, objstore.DepsKey(hash), &buf, int64(buf.Len()), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	ok, err := s.RestoreDeps(ctx)
	if err != nil || !ok {
		t.Fatalf("RestoreDeps from the gzip layer = %v, %v", ok, err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "node_modules/old/index.js")); err != nil || string(b) != "old layer" {
		t.Fatalf("restored: %q %v", b, err)
	}
	s.setLastHash("") // as a fresh pod would
	if err := s.EnsureDeps(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Head(ctx, objstore.DepsKeyZstd(hash)); !errors.Is(err, objstore.ErrNotExist) {
		t.Fatalf("a zstd copy was uploaded although the gzip layer exists: %v", err)
	}
}
