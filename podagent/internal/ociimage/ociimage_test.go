package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1"

	"github.com/svc-dev/svc/podagent/internal/metal/guestimage"
)

var progOnce = sync.OnceValues(func() ([]byte, error) {
	dir, err := os.MkdirTemp("", "ociimage-prog-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\n\nfunc main() { println(\"hello\") }\n"), 0o644); err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "prog")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, src)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GO111MODULE=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build: %v\n%s", err, out)
	}
	return os.ReadFile(bin)
})

// staticBinary writes a small static program (built once, CGO off) with
// extra bytes appended (still a valid ELF file; other bytes, another image).
func staticBinary(t *testing.T, extra string) string {
	t.Helper()
	b, err := progOnce()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "prog")
	if err := os.WriteFile(p, append(append([]byte(nil), b...), extra...), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func archiveSum(t *testing.T, img v1.Image) (v1.Hash, [32]byte) {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "img.oci.tar")
	if err := Write(p, "ghcr.io/svc-dev/svc-test:dev", img); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return d, sha256.Sum256(b)
}

// Reproducible: the same binary (another copy, another file time) gives the
// same image digest and the same archive bytes; another binary does not.
func TestBuildIsReproducible(t *testing.T) {
	t.Parallel()
	bin := staticBinary(t, "")
	copyBin := filepath.Join(t.TempDir(), "prog")
	b, _ := os.ReadFile(bin)
	if err := os.WriteFile(copyBin, b, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(copyBin, time.Now().Add(time.Hour), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	other := staticBinary(t, "another build")
	// The tools are the static program too: the test is about the build,
	// not about compressing git under the race detector.
	tools := guestimage.Tools{Git: bin, GitLFS: bin, Shell: bin}
	digest := map[string]v1.Hash{}
	archive := map[string][32]byte{}
	for name, path := range map[string]string{"first": bin, "copy": copyBin, "other": other} {
		img, err := Build(Spec{Binary: path, Name: "prog", Cmd: []string{"serve"}, Tools: tools})
		if err != nil {
			t.Fatal(err)
		}
		digest[name], archive[name] = archiveSum(t, img)
	}
	if digest["first"] != digest["copy"] || archive["first"] != archive["copy"] {
		t.Fatalf("two builds of the same binary differ: %v %v", digest["first"], digest["copy"])
	}
	if digest["first"] == digest["other"] {
		t.Fatal("another binary gave the same digest")
	}
}

// A dynamically linked binary is refused: the image has no libc for it.
func TestBuildRefusesDynamicBinary(t *testing.T) {
	t.Parallel()
	git, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Build(Spec{Binary: git, Name: "git"}); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Fatalf("Build of a dynamic binary: %v", err)
	}
}

type tarEntry struct {
	mode     int64
	uid, gid int
	dir      bool
	data     []byte
}

func entriesOf(t *testing.T, lf *layerFiles) map[string]tarEntry {
	t.Helper()
	b, err := lf.tar()
	if err != nil {
		t.Fatal(err)
	}
	return tarEntries(t, bytes.NewReader(b))
}

func layerEntries(t *testing.T, l v1.Layer) map[string]tarEntry {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	return tarEntries(t, rc)
}

func tarEntries(t *testing.T, rc io.Reader) map[string]tarEntry {
	t.Helper()
	out := map[string]tarEntry{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(Epoch) {
			t.Errorf("%s has time %v, want %v", h.Name, h.ModTime, Epoch)
		}
		b, _ := io.ReadAll(tr)
		out["/"+strings.TrimSuffix(h.Name, "/")] = tarEntry{mode: h.Mode, uid: h.Uid, gid: h.Gid, dir: h.Typeflag == tar.TypeDir, data: b}
	}
}

// The image holds only what runs: the binary, git, git-lfs, sh, zstd (the
// cold start's decompressor) and their shared objects, the CA bundle, passwd/group
// naming user 65532; it runs as 65532 with the binary as entrypoint.
func TestImageHoldsOnlyWhatRuns(t *testing.T) {
	t.Parallel()
	bin := staticBinary(t, "")
	tools, err := guestimage.HostTools()
	if err != nil {
		t.Fatal(err)
	}
	lf, err := baseFiles(Spec{Binary: bin, Name: "podagent", Tools: tools, CACerts: CACerts})
	if err != nil {
		t.Fatal(err)
	}
	base := entriesOf(t, lf) // the real base layer, uncompressed
	// The image itself with small tools (compressing git under -race is slow).
	img, err := Build(Spec{Binary: bin, Name: "podagent", Cmd: []string{"serve"}, Tools: guestimage.Tools{Git: bin, GitLFS: bin, Shell: bin}})
	if err != nil {
		t.Fatal(err)
	}
	ls, err := img.Layers()
	if err != nil || len(ls) != 2 {
		t.Fatalf("layers: %d %v", len(ls), err)
	}
	app := layerEntries(t, ls[1])
	files, err := guestimage.ToolFiles(tools)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{CACerts: true, "/etc/passwd": true, "/etc/group": true}
	for _, f := range files {
		want[f.Dst] = true
	}
	var got []string
	for p, e := range base {
		if !e.dir {
			got = append(got, p)
			if !want[p] {
				t.Errorf("unexpected file %s in the base layer", p)
			}
		}
	}
	sort.Strings(got)
	if len(got) != len(want) {
		t.Errorf("base layer files %v, want %v", got, want)
	}
	for _, p := range []string{"/usr/bin/git", "/usr/bin/git-lfs", "/bin/sh", "/usr/bin/zstd"} {
		if e := base[p]; e.mode != 0o755 || len(e.data) == 0 {
			t.Errorf("%s: mode %o, %d bytes", p, e.mode, len(e.data))
		}
	}
	if !bytes.Contains(base["/etc/passwd"].data, []byte("svc:x:65532:65532:")) || !bytes.Contains(base["/etc/group"].data, []byte("svc:x:65532:")) {
		t.Errorf("passwd/group: %s %s", base["/etc/passwd"].data, base["/etc/group"].data)
	}
	if e := base["/tmp"]; !e.dir || e.mode != 0o1777 {
		t.Errorf("/tmp: %+v", e)
	}
	for _, d := range []string{"/workspace", "/data"} {
		if e := base[d]; !e.dir || e.uid != UID || e.gid != GID {
			t.Errorf("%s: %+v, want a directory of %d", d, e, UID)
		}
	}
	if e := app["/usr/local/bin/podagent"]; e.mode != 0o755 || len(e.data) == 0 || len(app) != 4 { // usr, usr/local, usr/local/bin, the binary
		t.Errorf("app layer: %d entries, binary mode %o", len(app), e.mode)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" || strings.Join(cf.Config.Entrypoint, " ") != "/usr/local/bin/podagent" ||
		strings.Join(cf.Config.Cmd, " ") != "serve" || !cf.Created.Time.Equal(Epoch) {
		t.Errorf("config: %+v created %v", cf.Config, cf.Created)
	}
}
