package durable_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/podagent/internal/durable"
	"github.com/svc-dev/svc/podagent/internal/ownership"
	"github.com/svc-dev/svc/shared/archive"
	"github.com/svc-dev/svc/shared/gitrun"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/objstore/fs"
)

// git runs git in dir with no user or system config and returns its
// trimmed output.
func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t.invalid", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t.invalid")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// pod is one pod's persister of project "p1" over the shared store.
func pod(t *testing.T, st objstore.Store, workspace, name string) *durable.Persister {
	t.Helper()
	log := zaptest.NewLogger(t).Named(name)
	lease := ownership.New(ownership.Options{Store: st, ProjectID: "p1", Pod: name, Log: log})
	if err := lease.Claim(context.Background()); err != nil {
		t.Fatalf("%s: claim: %v", name, err)
	}
	return durable.New(durable.Options{Store: st, ProjectID: "p1", Workspace: workspace, Runner: &gitrun.Runner{},
		Log: log, Lease: lease})
}

func persist(ctx context.Context, p *durable.Persister) (objstore.ObjectInfo, error) {
	snap, err := p.Snapshot(ctx, false)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	defer snap.Remove()
	return p.Upload(ctx, snap)
}

// The durable object round-trips a history to a new pod on an empty disk,
// with nothing of the old .git's config or hooks able to run there; the
// new pod's claim fences the old one, whose next write is refused and
// leaves the object as it was (spec 10.1.1: the pod is the sole writer).
func TestPersistRestoreAndFencing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := fs.New(t.TempDir(), fs.Options{})
	if err != nil {
		t.Fatal(err)
	}

	// Pod A: a fresh project (nothing to restore), one commit, persisted.
	wsA := t.TempDir()
	a := pod(t, st, wsA, "pod-a")
	if restored, err := a.Restore(ctx, archive.ExtractOptions{}); err != nil || restored {
		t.Fatalf("restore of a new project = %v, %v; want nothing restored", restored, err)
	}
	git(t, wsA, "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(wsA, "notes.txt"), []byte("turn 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, wsA, "add", "-A")
	git(t, wsA, "commit", "-q", "-m", "turn 1")
	head := git(t, wsA, "rev-parse", "HEAD")
	// What a hostile or careless history could carry: a config that runs a
	// command on every git status, and a hook.
	git(t, wsA, "config", "core.fsmonitor", "touch "+filepath.Join(wsA, "pwned"))
	if err := os.WriteFile(filepath.Join(wsA, ".git", "hooks", "post-checkout"), []byte("#!/bin/sh\ntouch pwned\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	first, err := persist(ctx, a)
	if err != nil {
		t.Fatalf("pod A persist: %v", err)
	}
	if a.ETag() != first.ETag || first.ETag == "" {
		t.Fatalf("pod A remembers ETag %q, wrote %q", a.ETag(), first.ETag)
	}

	// Pod B on an empty disk takes the project over and restores A's history.
	wsB := t.TempDir()
	b := pod(t, st, wsB, "pod-b")
	if restored, err := b.Restore(ctx, archive.ExtractOptions{}); err != nil || !restored {
		t.Fatalf("pod B restore = %v, %v; want restored", restored, err)
	}
	if got := git(t, wsB, "rev-parse", "HEAD"); got != head {
		t.Fatalf("restored HEAD %s, want %s", got, head)
	}
	if cfg := git(t, wsB, "config", "--list", "--local"); strings.Contains(cfg, "fsmonitor") {
		t.Fatalf("the restored config kept core.fsmonitor:\n%s", cfg)
	}
	if _, err := os.Stat(filepath.Join(wsB, ".git", "hooks", "post-checkout")); !os.IsNotExist(err) {
		t.Fatalf("the restored .git kept the hook (stat: %v)", err)
	}
	git(t, wsB, "checkout", "-q", "--", ".")
	git(t, wsB, "status", "--porcelain")
	if _, err := os.Stat(filepath.Join(wsA, "pwned")); !os.IsNotExist(err) {
		t.Fatal("a command from the restored config or hooks ran")
	}

	// Pod A's next write is fenced, and the object is still the one A wrote.
	if _, err := persist(ctx, a); !errors.Is(err, durable.ErrFenced) {
		t.Fatalf("pod A persist after the takeover = %v, want ErrFenced", err)
	}
	if !a.Fenced() {
		t.Fatal("pod A does not report itself fenced")
	}
	info, err := st.Head(ctx, objstore.RepoManifestKey("p1"))
	if err != nil || info.ETag != first.ETag {
		t.Fatalf("durable object after the refused write: %+v, %v; want ETag %s", info, err, first.ETag)
	}
	// Pod B writes on top of what it restored.
	if _, err := persist(ctx, b); err != nil {
		t.Fatalf("pod B persist: %v", err)
	}
}
