package ownership_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/svc-dev/svc/podagent/internal/ownership"
	"github.com/svc-dev/svc/shared/objstore"
	fsstore "github.com/svc-dev/svc/shared/objstore/fs"
	s3store "github.com/svc-dev/svc/shared/objstore/s3"
	"github.com/svc-dev/svc/shared/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func stores(t *testing.T) map[string]func(t *testing.T) objstore.Store {
	return map[string]func(t *testing.T) objstore.Store{
		"fs": func(t *testing.T) objstore.Store {
			s, err := fsstore.New(t.TempDir(), fsstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		"minio": func(t *testing.T) objstore.Store {
			env := testenv.MinIO(t)
			s, err := s3store.New(context.Background(), s3store.Config{Endpoint: env.Endpoint, Bucket: env.Bucket,
				AccessKey: env.AccessKey, SecretKey: env.SecretKey})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
}

func body(s string) ownership.Body {
	return func() (io.ReadCloser, int64, error) { return io.NopCloser(strings.NewReader(s)), int64(len(s)), nil }
}

func read(t *testing.T, s objstore.Store, key string) string {
	t.Helper()
	rc, _, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	return string(b)
}

func lease(s objstore.Store, pod string, gen int64) (*ownership.Lease, *observer.ObservedLogs) {
	core, logs := observer.New(zap.InfoLevel)
	return ownership.New(ownership.Options{Store: s, ProjectID: "p1", Pod: pod, Generation: gen, Log: zap.New(core)}), logs
}

func fencedLines(logs *observer.ObservedLogs) int {
	return logs.FilterMessageSnippet("FENCED").Len()
}

// The newest claimant owns the project. Afterwards: the older pod's
// in-flight write (begun before the claim) cannot replace what the newer
// pod wrote; the older pod is fenced with one FENCED line and writes
// nothing more; the newer pod replaces a version the older one wrote after
// losing, and its own writes land.
func TestNewestClaimOwnsTheProject(t *testing.T) {
	t.Parallel()
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := open(t)
			const key = "p1/project-src.tar.gz"
			a, aLogs := lease(s, "a", 0)
			if err := a.Claim(ctx); err != nil || a.Epoch() != 1 {
				t.Fatalf("A claim: epoch %d, %v", a.Epoch(), err)
			}
			v1, err := a.Put(ctx, s, key, "", body("A1"), objstore.PutOptions{})
			if err != nil {
				t.Fatal(err)
			}

			b, bLogs := lease(s, "b", 0)
			if err := b.Claim(ctx); err != nil || b.Epoch() != 2 {
				t.Fatalf("B claim: epoch %d, %v", b.Epoch(), err)
			}
			if rec, _, err := objstore.ReadOwnerRecord(ctx, s, "p1"); err != nil || rec.Epoch != 2 || rec.Pod != "b" {
				t.Fatalf("record = %+v %v", rec, err)
			}
			// A's write that passed its check before B claimed lands after
			// B restored v1 (modelled by a raw conditional PUT): B replaces it.
			if _, err := s.Put(ctx, key, strings.NewReader("A2-late"), 7, objstore.PutOptions{IfMatch: v1.ETag}); err != nil {
				t.Fatal(err)
			}
			vb, err := b.Put(ctx, s, key, v1.ETag, body("B1"), objstore.PutOptions{})
			if err != nil || read(t, s, key) != "B1" {
				t.Fatalf("B's write over the late version: %v, object %q", err, read(t, s, key))
			}
			// A's next write (conditional on its own last version) is refused
			// and fences it, before and without touching the object.
			if _, err := a.Put(ctx, s, key, v1.ETag, body("A3"), objstore.PutOptions{}); !errors.Is(err, ownership.ErrFenced) {
				t.Fatalf("A put after B claimed: %v, want ErrFenced", err)
			}
			for range 3 {
				if err := a.Check(ctx); !errors.Is(err, ownership.ErrFenced) {
					t.Fatalf("A check: %v", err)
				}
			}
			if err := a.Delete(ctx, s, key); !errors.Is(err, ownership.ErrFenced) {
				t.Fatalf("A delete: %v", err)
			}
			if got := read(t, s, key); got != "B1" {
				t.Fatalf("object = %q, want B1", got)
			}
			if !a.Fenced() || b.Fenced() {
				t.Fatalf("fenced: A %v B %v", a.Fenced(), b.Fenced())
			}
			if n, m := fencedLines(aLogs), fencedLines(bLogs); n != 1 || m != 0 {
				t.Fatalf("FENCED lines: A %d (want 1), B %d (want 0)", n, m)
			}
			// B keeps writing on its own versions.
			if _, err := b.Put(ctx, s, key, vb.ETag, body("B2"), objstore.PutOptions{}); err != nil || read(t, s, key) != "B2" {
				t.Fatalf("B's next write: %v", err)
			}
		})
	}
}

// A pod of an older runtime generation (a replaced pod that restarted)
// never takes the project back from a newer generation: it is fenced at its
// claim and the record is unchanged.
func TestOlderGenerationNeverClaimsOverNewer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := stores(t)["fs"](t)
	newer, _ := lease(s, "gen2", 2)
	if err := newer.Claim(ctx); err != nil {
		t.Fatal(err)
	}
	older, logs := lease(s, "gen1", 1)
	if err := older.Claim(ctx); !errors.Is(err, ownership.ErrFenced) {
		t.Fatalf("older generation claim: %v, want ErrFenced", err)
	}
	if rec, _, err := objstore.ReadOwnerRecord(ctx, s, "p1"); err != nil || rec.Pod != "gen2" || rec.Generation != 2 {
		t.Fatalf("record = %+v %v", rec, err)
	}
	if err := newer.Check(ctx); err != nil || fencedLines(logs) != 1 {
		t.Fatalf("newer check: %v; older FENCED lines %d", err, fencedLines(logs))
	}
}

// Storage down at start: the claim fails without deciding anything, and
// the first Check claims once storage is back.
func TestClaimAtFirstCheckWhenStorageWasDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := stores(t)["fs"](t)
	down, cancel := context.WithCancel(ctx)
	cancel()
	l, _ := lease(s, "a", 0)
	if err := l.Claim(down); err == nil || errors.Is(err, ownership.ErrFenced) {
		t.Fatalf("claim with a cancelled context: %v, want a transient error", err)
	}
	if err := l.Check(ctx); err != nil || l.Epoch() != 1 || l.Fenced() {
		t.Fatalf("first check: epoch %d fenced %v err %v", l.Epoch(), l.Fenced(), err)
	}
}
