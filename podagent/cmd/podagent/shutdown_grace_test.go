package main

import (
	"context"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc/podagent/internal/agentloop/fakegateway"
	"github.com/svc-dev/svc/shared/wire"
)

// With a slow sync webhook request in flight, the pod used
// to drain HTTP (up to 30 s) and webhooks (up to 30 s) before its final git
// flush, and the runtime's SIGKILL came first. Here the runtime is emulated
// as the local driver does it — SIGTERM, then SIGKILL when the grace period
// ends — and the pod must have exited by then with spec 10.2's git flush
// and cold-start tarball done.
func TestShutdownFitsGraceWithSlowSyncRequest(t *testing.T) {
	t.Parallel()
	const grace = 18 * time.Second
	e := newEnv(t, "fs")
	gw := fakegateway.New(t, "p1", token)
	gw.SetChannel(wire.ChannelConfig{Configured: true, ChannelID: "ch_1", Secret: "sec"}, 0)
	gate := make(chan struct{}) // the model never answers: released at cleanup
	gw.Sequence(fakegateway.Reply{Gate: gate})
	p := e.start("SVC_API_URL="+gw.URL, "SVC_LFS=false", "SVC_SHUTDOWN_GRACE="+grace.String())

	answered := make(chan int, 1)
	go func() { // no t.Fatal here
		req, _ := http.NewRequest(http.MethodPost, "http://"+p.addr+"/agent/channels/webhook/incoming",
			strings.NewReader(`{"message":"a long job"}`))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set(wire.HeaderWebhookSecret, "sec")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- 0
			return
		}
		res.Body.Close()
		answered <- res.StatusCode
	}()
	deadline := time.Now().Add(30 * time.Second)
	for len(gw.Requests()) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the sync turn never reached the model\n%s", e.logs())
		}
		time.Sleep(20 * time.Millisecond) // poll with a deadline
	}
	e.write("late.txt", "written before SIGTERM\n")

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(grace): // the runtime's SIGKILL
		_ = p.cmd.Process.Kill()
		<-p.exited
		close(gate)
		t.Fatalf("podagent still ran when the %s grace period ended: killed before its flushes finished\n%s", grace, e.logs())
	}
	close(gate)
	<-answered

	dir := e.durableGitDir()
	out, err := exec.Command("git", "--git-dir", dir, "show", "HEAD:late.txt").CombinedOutput()
	if err != nil || string(out) != "written before SIGTERM\n" {
		t.Fatalf("the final git flush did not persist late.txt: %s %v\n%s", out, err, e.logs())
	}
	if _, err := e.store.Head(context.Background(), "p1/project-src.tar.gz"); err != nil {
		t.Fatalf("no cold-start tarball: %v\n%s", err, e.logs())
	}
}
