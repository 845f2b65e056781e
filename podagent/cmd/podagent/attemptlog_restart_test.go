package main

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc/podagent/internal/agentloop/fakegateway"
	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/wire"
)

// The attempt log survives a restart of the pod process: a real podagent
// delivers an async reply (the receiver refuses the first attempt, takes
// the second) while the API refuses the attempt records (503); the pod is
// killed with SIGKILL before the API took any, and the next run on the same
// workspace hands both records to the API, each exactly once.
func TestAttemptLogSurvivesAPodRestart(t *testing.T) {
	t.Parallel()
	testenv.RequireTool(t, "git")
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("attempt-log-restart-key-32bytes!"))
	gw := fakegateway.New(t, "p1", token)
	gw.SetChannel(wire.ChannelConfig{Configured: true, ChannelID: "ch_1", Secret: secret}, 0)
	gw.SetAttemptsDown(true)
	gw.Script(func(r fakegateway.Request) fakegateway.Reply {
		for _, m := range r.Messages() {
			if m["role"] == "tool" {
				return fakegateway.Reply{Text: "done task-3"}
			}
		}
		return fakegateway.Reply{ToolCalls: []fakegateway.ToolCall{{ID: "w", Name: "write_file",
			Arguments: `{"path":"tasks/task-3.txt","content":"task-3\n"}`}}}
	})
	recv := newReceiver(t, secret) // task 3: the first attempt is refused (503), the second taken

	ws := t.TempDir()
	e := &env{t: t, ws: ws, hooks: t.TempDir(), logFile: filepath.Join(t.TempDir(), "podagent.log")}
	e.vars = []string{"SVC_PROJECT_ID=p1", "SVC_RUNTIME_TOKEN=" + token, "SVC_API_URL=" + gw.URL,
		"SVC_WORKSPACE_DIR=" + ws, "SVC_DATA_DIR=" + t.TempDir(), "SVC_STORAGE=fs", "SVC_LFS=false",
		"SVC_CALLBACK_ALLOWED_NETS=127.0.0.0/8", "SVC_CALLBACK_MAX_ATTEMPTS=3", "SVC_CALLBACK_RETRY_BASE=20ms",
		"SVC_CALLBACK_RETRY_MAX=100ms", "SVC_CHANNEL_CONFIG_TTL=1h", "PATH=" + os.Getenv("PATH")}
	p := e.start()

	body := `{"message":"task-3","callbackUrl":"` + recv.URL + `/cb","metadata":{"task":3}}`
	req, _ := http.NewRequest(http.MethodPost, "http://"+p.addr+"/agent/channels/webhook/incoming", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set(wire.HeaderWebhookSecret, secret)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var acc wire.WebhookAccepted
	if res.StatusCode != http.StatusAccepted || json.NewDecoder(res.Body).Decode(&acc) != nil {
		t.Fatalf("incoming: %d", res.StatusCode)
	}
	res.Body.Close()

	// Both attempts were made and the API refused both records: they are
	// in the pod's journal (written before each POST), nowhere else. The
	// pod has also finished the message (its delivered notice reached the
	// outbox, journaled in the transaction that ends the message): killed
	// before that, the next run would deliver the reply again (the same
	// webhook-id, at least once) and log a third attempt.
	waitFor(t, p, e, "the API to refuse both attempt records and the pod to finish the message", func() bool {
		_, refused := gw.Attempts()
		recv.mu.Lock()
		delivered := len(recv.deliveries[acc.CorrelationID]) == 1
		recv.mu.Unlock()
		return delivered && len(refused) == 2 &&
			gw.Outbox()[acc.CorrelationID].Status == wire.OutboxStatusDelivered
	})
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.exited
	if taken, _ := gw.Attempts(); len(taken) != 0 {
		t.Fatalf("the API took %v while down", taken)
	}

	gw.SetAttemptsDown(false)
	p2 := e.start()
	_, refused := gw.Attempts()
	waitFor(t, p2, e, "the next run to hand the records over", func() bool {
		taken, _ := gw.Attempts()
		return len(taken) == len(refused)
	})
	// A clean stop makes the log's last attempt: nothing is posted twice.
	if err := p2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-p2.exited
	taken, _ := gw.Attempts()
	ids := make([]string, 0, len(taken))
	for id, n := range taken {
		ids = append(ids, id)
		if n != 1 {
			t.Errorf("attempt record %s taken %d times, want once", id, n)
		}
	}
	slices.Sort(ids)
	slices.Sort(refused)
	if !slices.Equal(ids, refused) {
		t.Fatalf("taken after the restart %v, want the records of the first run %v", ids, refused)
	}
	recv.mu.Lock()
	defer recv.mu.Unlock()
	if n := recv.attempts[acc.CorrelationID]; n != len(ids) {
		t.Fatalf("the receiver saw %d attempts, the API has %d records", n, len(ids))
	}
}

// waitFor polls cond (with a deadline) while p runs.
func waitFor(t *testing.T, p *proc, e *env, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s\n%s", what, e.logs())
		}
		select {
		case <-p.exited:
			t.Fatalf("podagent exited waiting for %s: %v\n%s", what, p.err, e.logs())
		case <-time.After(50 * time.Millisecond): // poll with a deadline
		}
	}
}
