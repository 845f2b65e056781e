package main

import (
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/svc-dev/svc/shared/archive"
	"github.com/svc-dev/svc/shared/objstore"
)

// `podagent serve` exited while object storage was down,
// even with its .git already local. It now starts on the local .git, serves
// turns (their persist fails and counts toward degrade, spec 3.2), and the
// first flush once storage is back adopts the durable object and persists.
func TestPodStartsOnLocalGitWhileStorageIsDown(t *testing.T) {
	t.Parallel()
	e, proxy := newEnvBehindFaultProxy(t)
	p := e.start()
	e.write("a.txt", "a\n")
	if code, body := p.flush(t, `{}`); code != 200 {
		t.Fatalf("flush with storage up: %d %s", code, body)
	}
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
	out, err := exec.Command("git", "-C", e.ws, "show", "HEAD:b.txt").Output()
	if err != nil || string(out) != "b\n" {
		t.Fatalf("the turn was not committed locally: %q %v", out, err)
	}

	proxy.SetDown(false)
	e.write("c.txt", "c\n")
	if code, body := p.flush(t, `{}`); code != 200 {
		t.Fatalf("flush once storage is back: %d %s\n%s", code, body, e.logs())
	}
	rc, _, err := e.store.Get(context.Background(), objstore.RepoKey("p1"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	_, err = archive.ExtractTarGz(rc, dir, archive.ExtractOptions{})
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"a.txt", "b.txt", "c.txt"} {
		if err := exec.Command("git", "--git-dir", dir, "cat-file", "-e", "HEAD:"+f).Run(); err != nil {
			t.Errorf("durable object lacks %s: %v", f, err)
		}
	}
}
