package repoarchive_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/svc-dev/svc/shared/archive"
	"github.com/svc-dev/svc/shared/repoarchive"
)

func TestLayout(t *testing.T) {
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
