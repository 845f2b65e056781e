package disk

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// A disk made from a tree reads back the same tree through debugfs without
// being written; a disk of zeros is reported unreadable.
func TestCreateAndDump(t *testing.T) {
	t.Parallel()
	tools := &Tools{}
	if err := tools.Check(); err != nil {
		t.Fatalf("e2fsprogs are required (.ci/run installs them): %v", err)
	}
	ctx := context.Background()
	src := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(src, "workspace", ".git", "refs"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "workspace", "a.txt"), []byte("hello\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(src, "workspace", ".git", "HEAD"), []byte("ref: refs/heads/main\n"), 0o644))
	img := filepath.Join(t.TempDir(), "disk.ext4")
	must(t, tools.Create(ctx, img, src, 16))
	before, err := os.ReadFile(img)
	must(t, err)

	dst := filepath.Join(t.TempDir(), "out")
	must(t, tools.Dump(ctx, img, "/workspace", dst, t.TempDir()))
	for rel, want := range map[string]string{"a.txt": "hello\n", ".git/HEAD": "ref: refs/heads/main\n"} {
		if b, err := os.ReadFile(filepath.Join(dst, "workspace", rel)); err != nil || string(b) != want {
			t.Errorf("%s: %q %v", rel, b, err)
		}
	}
	after, err := os.ReadFile(img)
	must(t, err)
	if string(before) != string(after) {
		t.Fatal("Dump wrote the image")
	}

	zero := filepath.Join(t.TempDir(), "zero.ext4")
	must(t, os.WriteFile(zero, make([]byte, 4<<20), 0o600))
	if err := tools.Dump(ctx, zero, "/workspace", filepath.Join(t.TempDir(), "z"), t.TempDir()); err == nil {
		t.Fatal("a disk of zeros was read")
	}
	if err := tools.Dump(ctx, img, "/missing", filepath.Join(t.TempDir(), "m"), t.TempDir()); err == nil {
		t.Fatal("a missing directory was dumped")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
