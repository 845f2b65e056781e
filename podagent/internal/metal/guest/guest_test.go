package guest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/podagent/internal/lfs"
	"github.com/svc-dev/svc/shared/gitrun"
	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/testenv/testfile"
)

func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@t"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// Cold boot's swap (spec 10.5): the staged .git replaces the workspace's,
// tracked files that differ from HEAD are kept under the pre-hydrate
// namespace before the reset, untracked files stay, the restored config is
// replaced; without a staged .git nothing happens.
func TestHydrate(t *testing.T) {
	t.Parallel()
	testenv.RequireTool(t, "git")
	ctx := context.Background()
	src := newRepo(t, map[string]string{"a.txt": "v1\n"})
	gitIn(t, src, "config", "core.fsmonitor", "touch /tmp/pwned") // must not survive the swap
	head := gitIn(t, src, "rev-parse", "HEAD")

	root := t.TempDir()
	ws := filepath.Join(root, WorkspaceRel)
	testfile.Write(t, filepath.Join(ws, "a.txt"), "edited before the boot\n")
	testfile.Write(t, filepath.Join(ws, "notes", "new.txt"), "untracked\n")
	stageGit(t, src, root, false)

	r := &gitrun.Runner{Timeout: time.Minute}
	ref, err := Hydrate(ctx, r, root, zaptest.NewLogger(t))
	must(t, err)
	if !strings.HasPrefix(ref, PreHydrateRefPrefix) {
		t.Fatalf("ref %q", ref)
	}
	if got := gitIn(t, ws, "show", ref+":a.txt"); got != "edited before the boot" {
		t.Fatalf("pre-hydrate a.txt %q", got)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(b) != "v1\n" {
		t.Fatalf("a.txt after the reset %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "notes", "new.txt")); string(b) != "untracked\n" {
		t.Fatalf("untracked file %q", b)
	}
	if got := gitIn(t, ws, "rev-parse", "HEAD"); got != head {
		t.Fatalf("HEAD %s, want %s", got, head)
	}
	if cfg, _ := os.ReadFile(filepath.Join(ws, ".git", "config")); strings.Contains(string(cfg), "fsmonitor") {
		t.Fatalf("the restored config survived: %s", cfg)
	}
	if _, err := os.Stat(filepath.Join(root, StagingGitRel)); !os.IsNotExist(err) {
		t.Fatalf("staging left behind: %v", err)
	}

	// No staged .git: a restart on the same disk changes nothing.
	ref, err = Hydrate(ctx, r, root, zaptest.NewLogger(t))
	if err != nil || ref != "" {
		t.Fatalf("second hydrate: %q %v", ref, err)
	}
	if got := gitIn(t, ws, "rev-parse", "HEAD"); got != head {
		t.Fatalf("HEAD moved: %s", got)
	}
}

// A clean work tree needs no pre-hydrate ref.
func TestHydrateCleanTree(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := newRepo(t, map[string]string{"a.txt": "v1\n"})
	root := t.TempDir()
	testfile.Write(t, filepath.Join(root, WorkspaceRel, "a.txt"), "v1\n")
	stageGit(t, src, root, true)
	ref, err := Hydrate(ctx, &gitrun.Runner{Timeout: time.Minute}, root, zaptest.NewLogger(t))
	if err != nil || ref != "" {
		t.Fatalf("clean hydrate: %q %v", ref, err)
	}
}

// newRepo makes a repository on main, sets config (key, value) and commits
// files (path → content).
func newRepo(t *testing.T, files map[string]string, config ...[2]string) string {
	t.Helper()
	src := t.TempDir()
	gitIn(t, src, "init", "-q", "-b", "main")
	for _, kv := range config {
		gitIn(t, src, "config", kv[0], kv[1])
	}
	for path, content := range files {
		testfile.Write(t, filepath.Join(src, path), content)
	}
	gitIn(t, src, "add", "-A")
	gitIn(t, src, "commit", "-q", "-m", "seed")
	return src
}

// stageGit moves src's .git to root's staging place, as the host leaves it
// for a cold boot; without its index unless keepIndex (the durable archive
// may lack it).
func stageGit(t *testing.T, src, root string, keepIndex bool) {
	t.Helper()
	staged := filepath.Join(root, StagingGitRel)
	must(t, os.MkdirAll(filepath.Dir(staged), 0o755))
	must(t, os.Rename(filepath.Join(src, ".git"), staged))
	if !keepIndex {
		must(t, os.Remove(filepath.Join(staged, "index")))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A large file the host hydrated as bytes (the data archive) equals HEAD's
// lfs pointer: no pre-hydrate ref, the bytes stay, and the fresh config
// carries only our lfs filter.
func TestHydrateKeepsLargeFileBytes(t *testing.T) {
	t.Parallel()
	testenv.RequireTool(t, "git-lfs")
	ctx := context.Background()
	big := strings.Repeat("large bytes\n", 100)
	src := newRepo(t, map[string]string{
		".gitattributes": "*.bin filter=lfs diff=lfs merge=lfs -text\n",
		"big.bin":        big,
	}, lfs.FilterSettings...)
	if ptr := gitIn(t, src, "show", "HEAD:big.bin"); !strings.HasPrefix(ptr, "version https://git-lfs") {
		t.Fatalf("HEAD holds %q, not a pointer", ptr)
	}
	root := t.TempDir()
	ws := filepath.Join(root, WorkspaceRel)
	testfile.Write(t, filepath.Join(ws, ".gitattributes"), "*.bin filter=lfs diff=lfs merge=lfs -text\n")
	testfile.Write(t, filepath.Join(ws, "big.bin"), big)
	stageGit(t, src, root, false)
	ref, err := Hydrate(ctx, &gitrun.Runner{Timeout: time.Minute}, root, zaptest.NewLogger(t))
	if err != nil || ref != "" {
		t.Fatalf("hydrate: %q %v", ref, err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "big.bin")); string(b) != big {
		t.Fatalf("big.bin after the hydrate: %.60q", b)
	}
	if got := gitIn(t, ws, "config", "filter.lfs.process"); got != "git-lfs filter-process --skip" {
		t.Fatalf("filter.lfs.process = %q", got)
	}
}
