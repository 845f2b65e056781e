package pod

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/podagent/internal/gitsync"
	"github.com/svc-dev/svc/podagent/internal/s3sync"
	"github.com/svc-dev/svc/shared/archive"
	"github.com/svc-dev/svc/shared/archive/archivetest"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/repoarchive"
)

// treeDigest maps every path under dir (except .git and the paths in skip)
// to its type, mode and content (or link target), so two trees compare
// exactly.
func treeDigest(t *testing.T, dir string, skip ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		for _, s := range append([]string{".git"}, skip...) {
			if rel == s {
				return filepath.SkipDir
			}
		}
		if rel == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = "link " + target
		case fi.IsDir():
			out[rel] = "dir"
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			out[rel] = fmt.Sprintf("file %v %x", fi.Mode().Perm()&0o111 != 0, sum)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameTree(t *testing.T, a, b map[string]string) {
	t.Helper()
	for k, v := range a {
		if b[k] != v {
			t.Errorf("%s: %q, restored %q", k, v, b[k])
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			t.Errorf("%s: only in the restored tree", k)
		}
	}
}

// writeNodeWorkspace writes a small Node workspace: sources, a lockfile and
// an installed (ignored) node_modules with a nested package, an executable
// and a .bin symlink.
func writeNodeWorkspace(t *testing.T, ws, lock string) {
	writeFile(t, ws, ".gitignore", "node_modules/\n")
	writeFile(t, ws, "package.json", `{"name":"app"}`)
	writeFile(t, ws, "package-lock.json", lock)
	for i := 0; i < 20; i++ {
		writeFile(t, ws, fmt.Sprintf("src/dir%d/mod%d.ts", i%4, i), fmt.Sprintf("export const v%d = %d;\n", i, i))
		writeFile(t, ws, fmt.Sprintf("node_modules/pkg%d/index.js", i), fmt.Sprintf("module.exports = %d;\n", i))
	}
	writeFile(t, ws, "node_modules/pkg1/node_modules/inner/lib.js", "inner\n")
	writeFile(t, ws, "node_modules/pkg2/bin/cli.js", "#!/usr/bin/env node\n")
	if err := os.Chmod(filepath.Join(ws, "node_modules/pkg2/bin/cli.js"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(ws, "node_modules/.bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../pkg2/bin/cli.js", filepath.Join(ws, "node_modules/.bin/cli")); err != nil {
		t.Fatal(err)
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestColdStartFromManifestRestoresIdenticalTree: the durable object
// carries the deps key of its HEAD (first entry, written in the same fenced
// PUT), a cold start restores .git, the work tree and node_modules to a tree
// identical to the original, and an object written before manifests
// existed still gets its deps layer (key read from HEAD's lockfile).
func TestColdStartFromManifestRestoresIdenticalTree(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store objstore.Store) {
		api, ws := newProject(t)
		const lock = `{"lockfileVersion":3,"packages":{}}`
		writeNodeWorkspace(t, ws, lock)
		p := startPod(t, api.options(ws, store))
		writeFile(t, ws, "src/new.ts", "export {};\n")
		if _, err := p.Turn(context.Background(), "turn"); err != nil {
			t.Fatal(err)
		}
		if err := p.S3.SyncDeps(context.Background()); err != nil {
			t.Fatal(err)
		}
		p.Close()

		// The manifest is the first entry and names HEAD's lockfile.
		name, data := archivetest.FirstEntry(t, store, objstore.RepoKey("p1"))
		if name != repoarchive.ManifestName {
			t.Fatalf("first entry of repo.git.tar.gz is %q", name)
		}
		m, err := repoarchive.ParseManifest(data)
		if err != nil || m.DepsHash != sha256Hex(lock) {
			t.Fatalf("manifest %s: %+v %v; want deps hash %s", data, m, err, sha256Hex(lock))
		}
		want := treeDigest(t, ws)

		ws2 := t.TempDir()
		p2 := startPod(t, api.options(ws2, store))
		if !p2.ColdStart.Restored || !p2.ColdStart.DepsRestored {
			t.Fatalf("cold start = %+v", p2.ColdStart)
		}
		sameTree(t, want, treeDigest(t, ws2))
		if _, err := os.Stat(filepath.Join(ws2, ".git", repoarchive.ManifestName)); !os.IsNotExist(err) {
			t.Fatalf("the manifest was extracted into .git: %v", err)
		}
		if got := gitIn(t, ws2, "config", "--get", "core.hooksPath"); got != "/dev/null" {
			t.Fatalf("core.hooksPath = %q", got)
		}
		p2.Close()

		// An object without a manifest (written before it existed).
		var buf bytes.Buffer
		if _, err := repoarchive.Create(&buf, filepath.Join(ws, ".git"), repoarchive.Options{}); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Put(context.Background(), objstore.RepoKey("p1"), &buf, int64(buf.Len()), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		ws3 := t.TempDir()
		p3 := startPod(t, api.options(ws3, store))
		if !p3.ColdStart.Restored || !p3.ColdStart.DepsRestored {
			t.Fatalf("cold start from an object without manifest = %+v", p3.ColdStart)
		}
		sameTree(t, want, treeDigest(t, ws3))
	})
}

// TestRepackInBackgroundKeepsHistory: once loose objects pass the
// threshold, a turn's persist starts a repack in the background; the
// history survives it and a restore of the next durable object.
func TestRepackInBackgroundKeepsHistory(t *testing.T) {
	t.Parallel()
	store := storeKinds()[0].open(t)
	api, ws := newProject(t)
	writeFile(t, ws, "README.md", "hello\n")
	p := startPod(t, Options{Config: testConfig("p1", ws, api.srv.URL), Store: store, RepackLooseObjects: 20})
	for i := 0; i < 12; i++ {
		writeFile(t, ws, fmt.Sprintf("src/f%d.txt", i%3), fmt.Sprintf("v%d\n", i))
		if _, err := p.Turn(context.Background(), fmt.Sprintf("turn %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	p.Sync.WaitBackground()
	loose, err := p.Repo.LooseObjects()
	if err != nil {
		t.Fatal(err)
	}
	packs, _ := p.Repo.Packs()
	if packs == 0 || loose > 20+4 { // at most one turn's objects after the last repack
		t.Fatalf("after 12 turns with threshold 20: %d loose objects, %d packs", loose, packs)
	}
	writeFile(t, ws, "last.txt", "last\n")
	if _, err := p.Turn(context.Background(), "last"); err != nil {
		t.Fatal(err)
	}
	p.Close()
	gitIn(t, ws, "fsck", "--full", "--no-progress")
	ws2 := t.TempDir()
	p2 := startPod(t, api.options(ws2, store))
	if a, b := gitIn(t, ws, "rev-list", "HEAD"), gitIn(t, ws2, "rev-list", "HEAD"); a != b || !p2.ColdStart.Restored {
		t.Fatalf("history differs after repack and restore:\n%s\n---\n%s", a, b)
	}
}

// TestDepsLayerAfterLockfileChange: a turn that changes the lockfile does
// not upload the deps layer itself (it runs in the background); git-flush
// makes sure it exists.
func TestDepsLayerAfterLockfileChange(t *testing.T) {
	t.Parallel()
	store := storeKinds()[0].open(t)
	api, ws := newProject(t)
	writeNodeWorkspace(t, ws, `{"v":1}`)
	p := startPod(t, api.options(ws, store))
	installTurn(t, p, ws, `{"v":2}`, "added")
	if _, err := p.Sync.Flush(context.Background(), gitsync.FlushOptions{}); err != nil {
		t.Fatal(err)
	}
	key := objstore.DepsKeyZstd(sha256Hex(`{"v":2}`))
	rc, _, err := store.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("after git-flush, %s: %v", key, err)
	}
	dst := t.TempDir()
	_, err = s3sync.ExtractTarZstd(rc, dst, archive.ExtractOptions{})
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "node_modules/added/index.js")); err != nil || string(b) != "added\n" {
		t.Fatalf("deps layer lacks the installed package: %q %v", b, err)
	}
}

// installTurn is a turn that changes the lockfile to lock and installs the
// package pkg (node_modules/<pkg>/index.js holds "<pkg>\n").
func installTurn(t *testing.T, p *Pod, ws, lock, pkg string) {
	t.Helper()
	writeFile(t, ws, "package-lock.json", lock)
	writeFile(t, ws, "node_modules/"+pkg+"/index.js", pkg+"\n")
	if _, err := p.Turn(context.Background(), "install"); err != nil {
		t.Fatal(err)
	}
}

// TestShutdownEnsuresDepsLayer: a healthy shutdown right after a lockfile
// turn leaves the deps layer of that lockfile in object storage.
func TestShutdownEnsuresDepsLayer(t *testing.T) {
	t.Parallel()
	store := storeKinds()[0].open(t)
	api, ws := newProject(t)
	writeNodeWorkspace(t, ws, `{"v":1}`)
	p, err := Start(context.Background(), Options{Config: testConfig("p1", ws, api.srv.URL), Store: store, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	installTurn(t, p, ws, `{"v":3}`, "late")
	res := p.Shutdown(context.Background())
	if res.GitFlushErr != nil {
		t.Fatalf("shutdown: %+v", res)
	}
	if _, err := store.Head(context.Background(), objstore.DepsKeyZstd(sha256Hex(`{"v":3}`))); err != nil {
		t.Fatalf("after shutdown, the deps layer of the last lockfile: %v", err)
	}
}
