// Package testfile writes the files a test sets up.
package testfile

import (
	"os"
	"path/filepath"
	"testing"
)

// Write writes body to path, creating its parent directories; any error
// fails t.
func Write(t testing.TB, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}
