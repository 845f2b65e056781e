package gitsync

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// The HEAD snapshot carries a large file's bytes instead of its pointer
// when the local cache has the object with the pointer's size; anything
// else passes through unchanged.
func TestSmudgeTarReplacesPointers(t *testing.T) {
	t.Parallel()
	lfsDir := t.TempDir()
	content := bytes.Repeat([]byte("big"), 1000)
	sum := sha256.Sum256(content)
	oid := hex.EncodeToString(sum[:])
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(lfsDir, oid[:2], oid[2:4]), 0o755))
	must(os.WriteFile(filepath.Join(lfsDir, oid[:2], oid[2:4], oid), content, 0o644))
	ptr := func(oid string, size int) string {
		return fmt.Sprintf("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", oid, size)
	}
	missing := "ab" + oid[2:]
	entries := []struct{ name, in, want string }{
		{"video.mp4", ptr(oid, len(content)), string(content)},
		{"wrong-size.bin", ptr(oid, 7), ptr(oid, 7)},
		{"not-cached.bin", ptr(missing, 10), ptr(missing, 10)},
		{"README.md", "# hello\n", "# hello\n"},
	}
	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	for _, e := range entries {
		must(tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.in)), Typeflag: tar.TypeReg}))
		_, err := tw.Write([]byte(e.in))
		must(err)
	}
	must(tw.Close())
	var out bytes.Buffer
	must(smudgeTar(&in, &out, lfsDir))
	tr := tar.NewReader(&out)
	for _, e := range entries {
		h, err := tr.Next()
		must(err)
		b, err := io.ReadAll(tr)
		must(err)
		if h.Name != e.name || string(b) != e.want || h.Size != int64(len(e.want)) {
			t.Errorf("%s: got %q (%d bytes), want %d bytes", h.Name, b[:min(len(b), 40)], len(b), len(e.want))
		}
	}
	if _, err := tr.Next(); err != io.EOF {
		t.Fatalf("extra entries: %v", err)
	}
}
