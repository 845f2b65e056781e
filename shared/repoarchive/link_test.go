package repoarchive_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/svc-dev/svc/shared/repoarchive"
)

// LinkTree hard-links every regular file (same inode, same path below the
// target), skips symlinks, and fails on a missing source unless told to
// pass over it.
func TestLinkTree(t *testing.T) {
	t.Parallel()
	from := t.TempDir()
	for rel, body := range map[string]string{"pack/p.pack": "pack", "pack/p.idx": "idx", "ab/cdef": "loose"} {
		p := filepath.Join(from, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(from, "info"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(from, "info", "link")); err != nil {
		t.Fatal(err)
	}
	to := filepath.Join(t.TempDir(), "objects")
	if err := repoarchive.LinkTree(from, to, false); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"pack/p.pack", "pack/p.idx", "ab/cdef"} {
		src, err := os.Stat(filepath.Join(from, filepath.FromSlash(rel)))
		if err != nil {
			t.Fatal(err)
		}
		dst, err := os.Stat(filepath.Join(to, filepath.FromSlash(rel)))
		if err != nil {
			t.Fatal(err)
		}
		if !os.SameFile(src, dst) {
			t.Fatalf("%s is not a hard link of the source", rel)
		}
	}
	if fi, err := os.Stat(filepath.Join(to, "info")); err != nil || !fi.IsDir() {
		t.Fatalf("directory info not created: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(to, "info", "link")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("symlink copied: %v", err)
	}

	missing := filepath.Join(t.TempDir(), "absent")
	if err := repoarchive.LinkTree(missing, filepath.Join(t.TempDir(), "x"), false); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing source without skipMissing: %v, want not-exist", err)
	}
	if err := repoarchive.LinkTree(missing, filepath.Join(t.TempDir(), "x"), true); err != nil {
		t.Fatalf("missing source with skipMissing: %v", err)
	}
}
