package hydrate_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/svc-dev/svc/apiserver/internal/hydrate"
	"github.com/svc-dev/svc/apiserver/internal/hydrate/hydratetest"
	"github.com/svc-dev/svc/shared/wire"
)

// A full data-directory disk is named: hydrating a repository
// bigger than a small tmpfs answers 507 insufficient_storage naming
// SVC_DATA_DIR — not a corrupt object, which would be remembered until the
// object changes — and the same object hydrates once there is room. The
// test mounts the tmpfs itself (it runs as root, as make test does).
func TestFullDataDirAnswers507(t *testing.T) {
	t.Parallel()
	st := hydratetest.MinIOStore(t)
	w := hydratetest.NewWork(t)
	w.Generate(4, 1<<20, true) // ~4 MiB that does not compress
	w.Persist(st, "prj_full")

	dir := filepath.Join(t.TempDir(), "small")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=2m,mode=0755"); err != nil {
		t.Fatalf("mounting a tmpfs (the test needs root, as make test has): %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	m := hydratetest.NewManager(t, hydrate.Options{Store: st, Dir: filepath.Join(dir, "hydrated")}, nil)

	_, err := m.Acquire(context.Background(), "prj_full")
	if !errors.Is(err, hydrate.ErrDiskFull) {
		t.Fatalf("hydrating onto a full disk: %v, want ErrDiskFull", err)
	}
	var ae *wire.Error
	if !errors.As(hydrate.APIError(err), &ae) || ae.Status != 507 || ae.Code != "insufficient_storage" ||
		!strings.Contains(ae.Message, "SVC_DATA_DIR") {
		t.Fatalf("answer %+v, want 507 insufficient_storage naming SVC_DATA_DIR", ae)
	}
	// Room again (the tmpfs grows): the same object hydrates.
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_REMOUNT, "size=64m,mode=0755"); err != nil {
		t.Fatal(err)
	}
	r, err := m.Acquire(context.Background(), "prj_full")
	if err != nil {
		t.Fatalf("after freeing space: %v", err)
	}
	r.Release()
}
