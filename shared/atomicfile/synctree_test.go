package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

// A power loss cannot be simulated here; these check that SyncTree walks a
// tree with files, directories and a dangling link without error, and
// reports a missing root instead of vouching for it.
func TestSyncTree(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "objects", "pack"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "objects", "pack", "p.pack"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("nowhere", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := SyncTree(root); err != nil {
		t.Fatalf("SyncTree: %v", err)
	}
	if err := SyncTree(filepath.Join(root, "missing")); err == nil {
		t.Fatal("SyncTree of a missing root: want an error")
	}
	if err := SyncDir(filepath.Join(root, "missing")); err == nil {
		t.Fatal("SyncDir of a missing dir: want an error")
	}
}
