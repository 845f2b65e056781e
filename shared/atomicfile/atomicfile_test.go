package atomicfile_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svc-dev/svc/shared/atomicfile"
)

func TestWriteReplacesWholeAndLeavesNoTemp(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	name := filepath.Join(dir, "sub", "state.json")
	for _, body := range []string{"first", "second, longer content"} {
		if err := atomicfile.Write(name, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(name)
		if err != nil || string(got) != body {
			t.Fatalf("read %q, %v; want %q", got, err, body)
		}
	}
	if fi, _ := os.Stat(name); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	entries, _ := os.ReadDir(filepath.Dir(name))
	if len(entries) != 1 {
		t.Fatalf("temp files left behind: %v", entries)
	}
	if err := atomicfile.Write(filepath.Join(dir, "missing-parent-is-a-file", "x"), nil, 0o600); err != nil {
		t.Fatalf("parents are created: %v", err)
	}
}

// WriteIn streams into a path inside a root, creating parents there, and
// cannot write outside it.
func TestWriteInStaysInsideTheRoot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	name := filepath.Join("a", "b", "big.bin")
	for _, body := range []string{"old", "new content"} {
		if err := atomicfile.WriteIn(root, name, strings.NewReader(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(got) != body {
			t.Fatalf("read %q, %v; want %q", got, err, body)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "a", "b")); len(entries) != 1 {
		t.Fatalf("temp files left behind: %v", entries)
	}
	if err := atomicfile.WriteIn(root, filepath.Join("..", "escaped"), strings.NewReader("x"), 0o644); err == nil {
		t.Fatal("a path leaving the root was written")
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escaped")); err == nil {
		t.Fatal("a file appeared outside the root")
	}
}
