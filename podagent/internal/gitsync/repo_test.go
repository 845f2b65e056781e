package gitsync

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/svc-dev/svc/shared/gitrun"
)

func newRepo(t *testing.T) *Repo {
	t.Helper()
	r := &Repo{Dir: t.TempDir(), Runner: &gitrun.Runner{}, Author: DefaultAuthor}
	ctx := context.Background()
	if err := r.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Configure(ctx); err != nil {
		t.Fatal(err)
	}
	return r
}

func tarNames(t *testing.T, b []byte) []string {
	t.Helper()
	var names []string
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatalf("not a tar: %v", err)
		}
		if h.Typeflag == tar.TypeXGlobalHeader || h.Typeflag == tar.TypeDir {
			continue
		}
		names = append(names, h.Name)
	}
}

// A workspace seeded with no files still snapshots (an empty tar), and a
// normal one leaves node_modules out.
func TestArchiveHEAD(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRepo(t)
	if _, err := r.Commit(ctx, "seed", true); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := r.ArchiveHEAD(ctx, &buf); err != nil {
		t.Fatalf("empty tree: %v", err)
	}
	if names := tarNames(t, buf.Bytes()); len(names) != 0 {
		t.Fatalf("empty tree archived %v", names)
	}

	for path, body := range map[string]string{"index.html": "x", "node_modules/a/b.js": "y", "src/node_modules/c.js": "z"} {
		full := filepath.Join(r.Dir, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.StageAll(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Commit(ctx, "files", false); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if err := r.ArchiveHEAD(ctx, &buf); err != nil {
		t.Fatal(err)
	}
	names := tarNames(t, buf.Bytes())
	for _, n := range names {
		if filepath.Base(filepath.Dir(n)) == "node_modules" || bytes.Contains([]byte(n), []byte("node_modules/")) {
			t.Fatalf("node_modules in the snapshot: %v", names)
		}
	}
	if len(names) != 1 || names[0] != "index.html" {
		t.Fatalf("snapshot entries %v", names)
	}
}
