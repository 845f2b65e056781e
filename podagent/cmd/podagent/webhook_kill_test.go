package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc/podagent/internal/agentloop/fakegateway"
	"github.com/svc-dev/svc/podagent/internal/callback"
	"github.com/svc-dev/svc/podagent/internal/testhook"
	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/wire"
)

// receiver is the integration's callback endpoint: it verifies every
// callback's Standard Webhooks signature and records the webhook-ids per
// correlationId. Tasks whose number ends in 3 fail their first attempt (503),
// those ending in 7 fail every attempt (the reply goes to the outbox).
type receiver struct {
	*httptest.Server
	secret string

	mu         sync.Mutex
	attempts   map[string]int      // by correlationId
	deliveries map[string][]string // webhook-ids of 2xx answers, by correlationId
	replies    map[string]string   // by correlationId
	bad        []string            // what failed verification
}

func newReceiver(t *testing.T, secret string) *receiver {
	r := &receiver{secret: secret, attempts: map[string]int{}, deliveries: map[string][]string{}, replies: map[string]string{}}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var cb wire.WebhookCallback
		err := callback.Verify(r.secret, body, req.Header)
		if err == nil {
			err = json.Unmarshal(body, &cb)
		}
		var meta struct{ Task int }
		if err == nil {
			err = json.Unmarshal(cb.Metadata, &meta)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if err != nil {
			r.bad = append(r.bad, fmt.Sprintf("%v: %s", err, body))
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		r.attempts[cb.CorrelationID]++
		if meta.Task%10 == 7 || (meta.Task%10 == 3 && r.attempts[cb.CorrelationID] == 1) {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		r.deliveries[cb.CorrelationID] = append(r.deliveries[cb.CorrelationID], req.Header.Get(callback.HeaderID))
		r.replies[cb.CorrelationID] = cb.Reply
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.Server.Close)
	return r
}

// The 202 is a promise: async messages are accepted by a
// real podagent that is killed with SIGKILL, again and again, at a random
// one of the points where a message can be — journaled before its 202, its
// turn about to run, its reply journaled before the commit, the commit made
// before the persist, a callback in retry backoff — and restarted on the same
// workspace. Every accepted message is delivered at least once (all repeats
// with the same webhook-id) or handed to the outbox, and no turn commits
// twice.
func TestWebhookAsyncMessagesSurviveKill9Loop(t *testing.T) {
	t.Parallel()
	testenv.RequireTool(t, "git")
	const total, batch = 100, 8
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("kill-loop-signing-key-32-bytes!!"))
	gw := fakegateway.New(t, "p1", token)
	gw.SetChannel(wire.ChannelConfig{Configured: true, ChannelID: "ch_1", Secret: secret}, 0)
	var runsMu sync.Mutex
	runs := map[string]int{} // turns started per task (first model call)
	gw.Script(func(r fakegateway.Request) fakegateway.Reply {
		task, toolDone := "", false
		for _, m := range r.Messages() {
			if c, _ := m["content"].(string); m["role"] == "user" && strings.HasPrefix(c, "task-") {
				task = c
			}
			if m["role"] == "tool" {
				toolDone = true
			}
		}
		if toolDone {
			return fakegateway.Reply{Text: "done " + task}
		}
		runsMu.Lock()
		runs[task]++
		runsMu.Unlock()
		return fakegateway.Reply{ToolCalls: []fakegateway.ToolCall{{ID: "w", Name: "write_file",
			Arguments: fmt.Sprintf(`{"path":"tasks/%s.txt","content":"%s\n"}`, task, task)}}}
	})
	recv := newReceiver(t, secret)

	ws := t.TempDir()
	e := &env{t: t, ws: ws, hooks: t.TempDir(), logFile: filepath.Join(t.TempDir(), "podagent.log")}
	e.vars = []string{"SVC_PROJECT_ID=p1", "SVC_RUNTIME_TOKEN=" + token, "SVC_API_URL=" + gw.URL,
		"SVC_WORKSPACE_DIR=" + ws, "SVC_DATA_DIR=" + t.TempDir(), "SVC_STORAGE=fs", "SVC_LFS=false",
		"SVC_CALLBACK_ALLOWED_NETS=127.0.0.0/8", "SVC_CALLBACK_MAX_ATTEMPTS=3", "SVC_CALLBACK_RETRY_BASE=20ms",
		"SVC_CALLBACK_RETRY_MAX=100ms", "SVC_CHANNEL_CONFIG_TTL=1h", "PATH=" + os.Getenv("PATH")}

	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0))
	t.Logf("seed %d", seed)
	points := []string{testhook.WebhookAccepted, testhook.WebhookTurn, testhook.WebhookReplied, testhook.AfterCommit,
		testhook.CallbackRetry}

	accepted := map[string]string{} // correlationId → task
	var acceptedMu sync.Mutex
	send := func(p *proc, n int) {
		task := fmt.Sprintf("task-%d", n)
		body := fmt.Sprintf(`{"message":%q,"callbackUrl":%q,"metadata":{"task":%d}}`, task, recv.URL+"/cb", n)
		req, _ := http.NewRequest(http.MethodPost, "http://"+p.addr+"/agent/channels/webhook/incoming", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set(wire.HeaderWebhookSecret, secret)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return // killed before the answer: not accepted (it may still be delivered)
		}
		defer res.Body.Close()
		var acc wire.WebhookAccepted
		if res.StatusCode == http.StatusAccepted && json.NewDecoder(res.Body).Decode(&acc) == nil {
			acceptedMu.Lock()
			accepted[acc.CorrelationID] = task
			acceptedMu.Unlock()
		}
	}

	// The batches go through the pause points in a random order, each point
	// in turn, so every run kills at every point, and the batches killed
	// before their 202s (WebhookAccepted) are a fifth, whatever the seed.
	order := rng.Perm(len(points))
	kills := map[string]int{}
	next := 0
	for b := 0; next < total; b++ {
		point := points[order[b%len(points)]]
		hooks := t.TempDir()
		if err := syscall.Mkfifo(filepath.Join(hooks, point), 0o644); err != nil {
			t.Fatal(err)
		}
		p := e.start("SVC_TEST_PAUSE_AT="+point, "SVC_TEST_HOOK_DIR="+hooks)
		reached := make(chan struct{})
		go func() { _, _ = os.ReadFile(filepath.Join(hooks, point)); close(reached) }()
		var wg sync.WaitGroup
		for i := 0; i < batch && next < total; i++ {
			wg.Add(1)
			go func(n int) { defer wg.Done(); send(p, n) }(next)
			next++
		}
		select {
		case <-reached:
		case <-p.exited:
			t.Fatalf("podagent exited: %v\n%s", p.err, e.logs())
		case <-time.After(60 * time.Second):
			t.Fatalf("podagent never reached %s\n%s", point, e.logs())
		}
		if point != testhook.WebhookAccepted {
			wg.Wait() // only that point holds the 202s back; the others are reached in the background
		}
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-p.exited
		wg.Wait()
		kills[point]++
	}

	// A last start without pause points finishes what the kills left.
	p := e.start()
	acceptedMu.Lock()
	want := len(accepted)
	acceptedMu.Unlock()
	deadline := time.Now().Add(90 * time.Second)
	for {
		missing := 0
		outbox := gw.Outbox()
		recv.mu.Lock()
		for corr := range accepted {
			if len(recv.deliveries[corr]) == 0 && outbox[corr].CorrelationID == "" {
				missing++
			}
		}
		recv.mu.Unlock()
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d accepted messages neither delivered nor in the outbox\n%s", missing, want, e.logs())
		}
		select {
		case <-p.exited:
			t.Fatalf("podagent exited: %v\n%s", p.err, e.logs())
		case <-time.After(50 * time.Millisecond): // poll with a deadline
		}
	}

	// Every accepted message: delivered (one webhook-id, the right reply) or in the outbox.
	outbox := gw.Outbox()
	recv.mu.Lock()
	defer recv.mu.Unlock()
	if len(recv.bad) > 0 {
		t.Fatalf("callbacks failing verification: %v", recv.bad)
	}
	delivered, repeats, outboxed := 0, 0, 0
	for corr, task := range accepted {
		ids := recv.deliveries[corr]
		for _, id := range ids {
			if id != "msg_"+strings.TrimPrefix(corr, "cor_") {
				t.Errorf("%s (%s): webhook-ids %v", corr, task, ids)
			}
		}
		switch {
		case len(ids) > 0:
			delivered++
			repeats += len(ids) - 1
			if r := recv.replies[corr]; r != "done "+task {
				t.Errorf("%s: reply %q, want %q", task, r, "done "+task)
			}
		case outbox[corr].CorrelationID != "":
			outboxed++
			if r := outbox[corr].Reply; r != "done "+task {
				t.Errorf("%s: outbox reply %q", task, r)
			}
		}
	}
	// No turn committed twice: one commit per task at most.
	out, err := exec.Command("git", "-C", ws, "log", "--format=%s").Output()
	if err != nil {
		t.Fatal(err)
	}
	commits := map[string]int{}
	for _, s := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if task, ok := strings.CutPrefix(s, "webhook: "); ok {
			commits[task]++
		}
	}
	twice, reruns := 0, 0
	for task, n := range commits {
		if n > 1 {
			twice++
			t.Errorf("%s committed %d times", task, n)
		}
	}
	runsMu.Lock()
	for _, n := range runs {
		if n > 1 {
			reruns++
		}
	}
	runsMu.Unlock()
	t.Logf("kill -9 loop: %d messages sent, %d accepted (202), %d delivered by callback (%d repeated deliveries, "+
		"same webhook-id), %d in the outbox, 0 lost; %d turns committed, %d committed twice; %d turns cut off "+
		"before their reply and run again; kills per point: %v",
		total, want, delivered, repeats, outboxed, len(commits), twice, reruns, kills)
	if delivered+outboxed != want {
		t.Fatalf("accounted %d of %d", delivered+outboxed, want)
	}
	if len(kills) != len(points) {
		t.Errorf("killed at %v, want every one of %v", kills, points)
	}
	if want < total/2 {
		t.Fatalf("only %d of %d messages accepted", want, total)
	}
}
