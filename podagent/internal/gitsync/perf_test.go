package gitsync

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigureOneWrite: the single write of .git/config gives git exactly
// the pod settings (as `git config` reads them back), drops whatever a
// restored config held (a hook path, an alias), and quotes an author with
// special characters.
func TestConfigureOneWrite(t *testing.T) {
	t.Parallel()
	r := newRepo(t)
	ctx := context.Background()
	cfg := filepath.Join(r.GitDir(), "config")
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(f, "[core]\n\tfsmonitor = /bin/evil\n[alias]\n\tx = !evil\n")
	f.Close()
	r.Author = Author{Name: `Ada "the" \ Agent`, Email: "ada@svc.invalid"}
	if err := r.Configure(ctx); err != nil {
		t.Fatal(err)
	}
	out, err := r.git("config", "--local", "--list").String(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"core.repositoryformatversion=0", "core.filemode=true", "core.bare=false", "core.logallrefupdates=true",
		"core.hookspath=/dev/null", "core.autocrlf=false", "core.quotepath=false", "gc.auto=0", "gc.autodetach=false",
		"maintenance.auto=false", "commit.gpgsign=false", "tag.gpgsign=false", `user.name=Ada "the" \ Agent`, "user.email=ada@svc.invalid"}
	if got := strings.Split(strings.TrimSpace(out), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("config:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The repository still works.
	if err := os.WriteFile(filepath.Join(r.Dir, "a.txt"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.StageAll(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Commit(ctx, "one", false); err != nil {
		t.Fatal(err)
	}
}

// TestRepackKeepsHistory: packing loose objects (incremental, then all
// into one once there are many packs) keeps every commit and blob, leaves
// no loose reachable object, and the repository passes a full fsck.
func TestRepackKeepsHistory(t *testing.T) {
	t.Parallel()
	r := newRepo(t)
	ctx := context.Background()
	var shas []string
	commit := func(i int) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(r.Dir, fmt.Sprintf("f%d.txt", i%7)), []byte(fmt.Sprintf("v%d\n", i)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := r.StageAll(ctx); err != nil {
			t.Fatal(err)
		}
		sha, err := r.Commit(ctx, fmt.Sprintf("c%d", i), false)
		if err != nil {
			t.Fatal(err)
		}
		shas = append(shas, sha)
	}
	for i := 0; i < 20; i++ {
		commit(i)
	}
	loose, err := r.LooseObjects()
	if err != nil || loose < 60 {
		t.Fatalf("loose objects = %d, %v", loose, err)
	}
	for round := 0; round < maxPacks+2; round++ {
		commit(100 + round)
		packs, err := r.Repack(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if packs < 1 || packs > maxPacks {
			t.Fatalf("round %d: %d packs", round, packs)
		}
		if loose, _ := r.LooseObjects(); loose != 0 {
			t.Fatalf("round %d: %d loose objects left", round, loose)
		}
	}
	out, err := r.git("rev-list", "--reverse", "HEAD").String(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(out); strings.Join(got, " ") != strings.Join(shas, " ") {
		t.Fatalf("history after repack:\n%v\nwant\n%v", got, shas)
	}
	if err := r.git("fsck", "--full", "--strict", "--no-progress").Run(ctx); err != nil {
		t.Fatalf("fsck after repack: %v", err)
	}
	for i, sha := range shas {
		want := fmt.Sprintf("v%d\n", i)
		if i >= 20 {
			want = fmt.Sprintf("v%d\n", 100+i-20)
		}
		file := fmt.Sprintf("f%d.txt", i%7)
		if i >= 20 {
			file = fmt.Sprintf("f%d.txt", (100+i-20)%7)
		}
		got, err := r.git("show").AddDynamic(sha + ":" + file).String(ctx)
		if err != nil || got+"\n" != want {
			t.Fatalf("%s:%s = %q %v, want %q", sha, file, got, err, want)
		}
	}
}

// TestConfigureKeepsSHA256: the object format of a sha256 repository
// survives the one-write config.
func TestConfigureKeepsSHA256(t *testing.T) {
	t.Parallel()
	r := &Repo{Dir: t.TempDir(), Runner: newRepo(t).Runner, Author: DefaultAuthor}
	ctx := context.Background()
	if err := r.git("init", "-q", "--object-format=sha256", "-b", "main").Run(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Configure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.Dir, "a.txt"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.StageAll(ctx); err != nil {
		t.Fatal(err)
	}
	sha, err := r.Commit(ctx, "one", false)
	if err != nil || len(sha) != 64 {
		t.Fatalf("commit in a sha256 repository after Configure: %q %v", sha, err)
	}
}
