package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A workspace has one owner: a second podagent on the same
// SVC_WORKSPACE_DIR refuses to start with an error naming the running one,
// before its cold start touches anything; the first keeps its work tree and
// still persists its next turn.
func TestSecondPodOnOneWorkspaceRefusesToStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "fs")
	first := e.start()
	e.write("a.txt", "a\n")
	if code, body := first.flush(t, `{}`); code != 200 {
		t.Fatalf("first flush: %d %s", code, body)
	}
	e.write("pending.txt", "not committed yet\n")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	second := exec.CommandContext(ctx, podagentBin, "serve")
	second.Env = append(append([]string{}, e.vars...), "SVC_HTTP_ADDR=127.0.0.1:0")
	out, err := second.CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("second podagent: err %v (context %v), want a prompt refusal\n%s", err, ctx.Err(), out)
	}
	for _, want := range []string{"SVC_WORKSPACE_DIR", e.ws, fmt.Sprintf("in use by process %d", first.cmd.Process.Pid)} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the refusal does not name %q:\n%s", want, out)
		}
	}
	if b, err := os.ReadFile(filepath.Join(e.ws, "pending.txt")); err != nil || string(b) != "not committed yet\n" {
		t.Fatalf("the first pod's work tree changed: %q %v", b, err)
	}
	if code, body := first.flush(t, `{}`); code != 200 {
		t.Fatalf("the first pod's next flush: %d %s", code, body)
	}
	e.requireCommitted("pending.txt", "not committed yet\n")
}
