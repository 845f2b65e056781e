package repoarchive_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svc-dev/svc/shared/archive"
	"github.com/svc-dev/svc/shared/repoarchive"
)

func TestLayout(t *testing.T) {
	t.Parallel()
	git := t.TempDir()
	for rel, body := range map[string]string{
		"HEAD": "ref: refs/heads/main\n", "refs/heads/main": "x\n", "objects/ab/cdef": "obj",
		"index.lock": "l", "refs/heads/main.lock": "l", "svc-agent/durable.json": "{}", "lfs/objects/x": "big",
		"gc.log": "g", "config": "[core]\n",
	} {
		p := filepath.Join(git, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, includeLFS := range []bool{false, true} {
		var buf bytes.Buffer
		if _, err := repoarchive.Create(&buf, git, repoarchive.Options{IncludeLFS: includeLFS}); err != nil {
			t.Fatal(err)
		}
		dst := t.TempDir()
		if _, err := archive.ExtractTarGz(&buf, dst, archive.ExtractOptions{}); err != nil {
			t.Fatal(err)
		}
		for rel, want := range map[string]bool{"HEAD": true, "refs/heads/main": true, "objects/ab/cdef": true, "config": true,
			"index.lock": false, "refs/heads/main.lock": false, "svc-agent": false, "gc.log": false, "lfs": includeLFS} {
			_, err := os.Stat(filepath.Join(dst, filepath.FromSlash(rel)))
			if (err == nil) != want {
				t.Errorf("includeLFS=%v: %s present=%v, want %v", includeLFS, rel, err == nil, want)
			}
		}
	}
}

// TestManifestFirst: the manifest is the archive's first entry, a stale
// manifest file on disk is never archived, and ParseManifest refuses what
// is not a hex hash.
func TestManifestFirst(t *testing.T) {
	t.Parallel()
	git := t.TempDir()
	for rel, body := range map[string]string{"HEAD": "ref: refs/heads/main\n", "objects/00/aa": "obj",
		repoarchive.ManifestName: `{"depsHash":"stale"}`} {
		p := filepath.Join(git, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if _, err := repoarchive.Create(&buf, git, repoarchive.Options{Manifest: &repoarchive.Manifest{DepsHash: "00ff"}}); err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
		if hdr.Name == repoarchive.ManifestName {
			b, _ := io.ReadAll(tr)
			m, err := repoarchive.ParseManifest(b)
			if err != nil || m.DepsHash != "00ff" {
				t.Fatalf("manifest %s = %+v, %v", b, m, err)
			}
		}
	}
	if len(names) == 0 || names[0] != repoarchive.ManifestName || strings.Count(strings.Join(names, " "), repoarchive.ManifestName) != 1 {
		t.Fatalf("entries %v: want the manifest first and once", names)
	}
	for _, bad := range []string{`{"depsHash":"../x"}`, `{"depsHash":"ABC"}`, `not json`} {
		if _, err := repoarchive.ParseManifest([]byte(bad)); err == nil {
			t.Errorf("ParseManifest(%s) accepted", bad)
		}
	}
}
