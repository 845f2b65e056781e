package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A git killed mid-write leaves .git/index.lock (and ref
// locks); every later flush answered 500 "File exists" forever. The pod
// removes stale locks before each turn and at start, on the real binary.
func TestStaleGitLocksDoNotBlockTurns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "fs")
	lock := func(names ...string) {
		t.Helper()
		for _, n := range names {
			p := filepath.Join(e.ws, ".git", n)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	p := e.start()
	e.write("a.txt", "a\n")
	if code, body := p.flush(t, `{}`); code != 200 {
		t.Fatalf("first flush: %d %s", code, body)
	}
	// Before a turn, with the pod running.
	lock("index.lock", "refs/heads/main.lock")
	e.write("b.txt", "b\n")
	if code, body := p.flush(t, `{}`); code != 200 {
		t.Fatalf("flush with stale locks: %d %s", code, body)
	}
	// kill -9, locks left behind, restart on the same workspace.
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.exited
	lock("index.lock", "HEAD.lock", "config.lock", "logs/refs/heads/main.lock")
	e.write("c.txt", "c\n")
	p = e.start()
	if code, body := p.flush(t, `{}`); code != 200 {
		t.Fatalf("flush after the restart: %d %s", code, body)
	}
	out, err := exec.Command("git", "-C", e.ws, "log", "--format=%H", "--", "a.txt", "b.txt", "c.txt").Output()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(string(out))); n != 3 {
		t.Fatalf("%d commits touch a, b, c: want 3\n%s", n, e.logs())
	}
	left, _ := filepath.Glob(filepath.Join(e.ws, ".git", "*.lock"))
	if len(left) != 0 {
		t.Fatalf("locks left: %v", left)
	}
}
