package atomicfile_test

import (
	"os"
	"path/filepath"
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
