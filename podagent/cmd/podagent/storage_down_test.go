package main

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// `podagent serve` exited while object storage was down,
// even with its .git already local. It now starts on the local .git, serves
// turns (their persist fails and counts toward degrade, spec 3.2), and the
// first flush once storage is back adopts the durable object and persists.
func TestPodStartsOnLocalGitWhileStorageIsDown(t *testing.T) {
	t.Parallel()
	e, proxy, p := startPersistedBehindFaultProxy(t)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.exited

	proxy.SetDown(true)
	p = e.start() // returns once /readyz answers 200
	e.write("b.txt", "b\n")
	if code, body := p.flush(t, `{}`); code != 503 || !strings.Contains(body, "not_persisted") {
		t.Fatalf("flush with storage down: %d %s, want 503 not_persisted", code, body)
	}
	e.requireCommitted("b.txt", "b\n")

	proxy.SetDown(false)
	e.write("c.txt", "c\n")
	if code, body := p.flush(t, `{}`); code != 200 {
		t.Fatalf("flush once storage is back: %d %s\n%s", code, body, e.logs())
	}
	dir := e.durableGitDir()
	for _, f := range []string{"a.txt", "b.txt", "c.txt"} {
		if err := exec.Command("git", "--git-dir", dir, "cat-file", "-e", "HEAD:"+f).Run(); err != nil {
			t.Errorf("durable object lacks %s: %v", f, err)
		}
	}
}
