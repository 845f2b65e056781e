package repoarchive_test

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svc-dev/svc/shared/repoarchive"
)

func tarOf(t *testing.T, entries ...tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range entries {
		h := h
		body := strings.Repeat("x", int(h.Size))
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func reg(name string) tar.Header {
	return tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o444, Size: 3}
}

// An increment may only hold one pack and its index: anything else (a
// config, a hook, a ref, a link, a path outside objects/pack, a third
// entry, content other than the manifest's hash) is refused and leaves
// nothing behind.
func TestExtractIncrementAllowlist(t *testing.T) {
	t.Parallel()
	h := strings.Repeat("a", 40)
	good := []tar.Header{reg("pack-" + h + ".pack"), reg("pack-" + h + ".idx")}
	link := tar.Header{Name: "pack-" + h + ".idx", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}
	cases := []struct {
		name    string
		entries []tar.Header
		badSum  bool
		ok      bool
	}{
		{"pack and index", good, false, true},
		{"wrong sha256", good, true, false},
		{"config", []tar.Header{reg("config"), good[0], good[1]}, false, false},
		{"hook", []tar.Header{reg("hooks/post-checkout")}, false, false},
		{"ref", []tar.Header{good[0], reg("refs/heads/main")}, false, false},
		{"path outside", []tar.Header{reg("../pack-" + h + ".pack"), good[1]}, false, false},
		{"symlink", []tar.Header{good[0], link}, false, false},
		{"a third entry", []tar.Header{good[0], good[1], reg("pack-" + strings.Repeat("b", 40) + ".pack")}, false, false},
		{"pack without index", []tar.Header{good[0]}, false, false},
		{"mismatched pair", []tar.Header{good[0], reg("pack-" + strings.Repeat("b", 40) + ".idx")}, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := tarOf(t, tc.entries...)
			sum := sha256.Sum256(b)
			want := hex.EncodeToString(sum[:])
			if tc.badSum {
				want = strings.Repeat("0", 64)
			}
			gitDir := t.TempDir()
			err := repoarchive.ExtractIncrement(bytes.NewReader(b), gitDir, want)
			if (err == nil) != tc.ok {
				t.Fatalf("ExtractIncrement = %v, want ok=%v", err, tc.ok)
			}
			files, _ := os.ReadDir(filepath.Join(gitDir, "objects", "pack"))
			if !tc.ok && len(files) != 0 {
				t.Fatalf("a refused increment left %v", files)
			}
			if tc.ok && len(files) != 2 {
				t.Fatalf("extracted %v", files)
			}
		})
	}
}

// A manifest is validated before anything is written from it.
func TestParseRepoManifestRefuses(t *testing.T) {
	t.Parallel()
	id := strings.Repeat("c", 40)
	sum := strings.Repeat("d", 64)
	cases := []struct {
		name, json string
		err        error
	}{
		{"ok", `{"version":1,"head":"refs/heads/main","refs":{"refs/heads/main":"` + id + `"},"increments":[{"key":"p1/repo.git.inc/x.tar","sha256":"` + sum + `"}]}`, nil},
		{"newer format", `{"version":2}`, repoarchive.ErrManifestVersion},
		{"no version", `{"refs":{}}`, errors.New("")},
		{"ref escaping", `{"version":1,"refs":{"refs/../../config":"` + id + `"}}`, errors.New("")},
		{"not a ref", `{"version":1,"refs":{"HEAD":"` + id + `"}}`, errors.New("")},
		{"bad id", `{"version":1,"refs":{"refs/heads/main":"--all"}}`, errors.New("")},
		{"HEAD outside refs/heads", `{"version":1,"head":"refs/tags/x","refs":{}}`, errors.New("")},
		{"another project's increment", `{"version":1,"increments":[{"key":"p2/repo.git.inc/x.tar","sha256":"` + sum + `"}]}`, errors.New("")},
		{"option in an increment's refs", `{"version":1,"increments":[{"key":"p1/repo.git.inc/x.tar","sha256":"` + sum + `","refs":{"refs/heads/main":"--not"}}]}`, errors.New("")},
	}
	for _, tc := range cases {
		_, err := repoarchive.ParseRepoManifest([]byte(tc.json), "p1")
		switch {
		case tc.err == nil && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.err != nil && err == nil:
			t.Errorf("%s: accepted", tc.name)
		case errors.Is(tc.err, repoarchive.ErrManifestVersion) && !errors.Is(err, repoarchive.ErrManifestVersion):
			t.Errorf("%s: %v, want ErrManifestVersion", tc.name, err)
		}
	}
}
