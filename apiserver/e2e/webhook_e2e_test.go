package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/svc-dev/svc/shared/testenv/fakeupstream"
	"github.com/svc-dev/svc/shared/wire"
)

// agentScript answers the pod's tool loop through the real gateway: the
// first call asks for write_file, the call that carries the tool result
// gets the final text.
func agentScript(path, content, final string, gate chan struct{}) func(fakeupstream.Request) fakeupstream.Reply {
	return func(r fakeupstream.Request) fakeupstream.Reply {
		msgs, _ := r.Body["messages"].([]any)
		for _, m := range msgs {
			if mm, _ := m.(map[string]any); mm["role"] == "tool" {
				return fakeupstream.Reply{Text: final, PromptTokens: 30, CompletionTokens: 4, Gate: gate}
			}
		}
		args, _ := json.Marshal(map[string]string{"path": path, "content": content})
		return fakeupstream.Reply{PromptTokens: 20, CompletionTokens: 6,
			ToolCalls: []fakeupstream.ToolCall{{ID: "call_1", Name: "write_file", Arguments: string(args)}}}
	}
}

func webhookWorld(t *testing.T, extraEnv ...string) (*proxyWorld, string) {
	t.Helper()
	w := newProxyWorld(t, podagentBin(t), append([]string{
		"SVC_CALLBACK_ALLOWED_NETS=127.0.0.0/8", "SVC_POD_CALLBACK_RETRY_BASE=20ms", "SVC_POD_CALLBACK_RETRY_MAX=100ms"},
		extraEnv...)...)
	ch := w.e.admin("channel", "set", "--project", w.project, "--secret", "hook-secret",
		"--callback-headers", `{"X-Team":"platform"}`)
	return w, ch["channelId"].(string)
}

// lateReplyWorld is a webhook world whose sync replies time out after a
// second and whose agent gives its final text, reply, once gate is closed.
func lateReplyWorld(t *testing.T, reply string) (w *proxyWorld, channelID string, gate chan struct{}) {
	t.Helper()
	w, channelID = webhookWorld(t, "SVC_POD_WEBHOOK_SYNC_TIMEOUT=1s")
	gate = make(chan struct{})
	w.e.upstream.Script(agentScript("late.txt", "late", reply, gate))
	return w, channelID, gate
}

func hookHeaders() http.Header {
	return http.Header{"X-Webhook-Secret": {"hook-secret"}, "Content-Type": {"application/json"}}
}

// Sync mode through the real API, local driver and pod: the reply
// comes back inline, the file is written, the turn ends in one commit, one
// checkpoint row and a persisted .git, and the commit shows in the graph.
func TestWebhookSyncTurnEndToEnd(t *testing.T) {
	t.Parallel()
	w, _ := webhookWorld(t)
	w.e.upstream.Script(agentScript("notes/hello.txt", "hi from the webhook", "I wrote notes/hello.txt", nil))
	before := w.e.checkpointCount(w.project)

	res, body := w.do(t, http.MethodPost, "/agent/channels/webhook/incoming",
		[]byte(`{"message":"please write a note","sender_id":"u-1","senderName":"Ops","metadata":{"ticket":42}}`), hookHeaders())
	if res.StatusCode != http.StatusOK {
		t.Fatalf("incoming: %d %s", res.StatusCode, body)
	}
	var reply struct{ Reply string }
	must(t, json.Unmarshal(body, &reply))
	if reply.Reply != "I wrote notes/hello.txt" {
		t.Fatalf("reply %q", reply.Reply)
	}
	ws := filepath.Join(w.dataDir, "runtimes", w.project, "workspace")
	if b, err := os.ReadFile(filepath.Join(ws, "notes", "hello.txt")); err != nil || string(b) != "hi from the webhook" {
		t.Fatalf("file in the workspace: %q %v", b, err)
	}
	if n := w.e.checkpointCount(w.project); n != before+1 {
		t.Fatalf("checkpoint rows %d, want %d", n, before+1)
	}
	if _, err := os.Stat(filepath.Join(w.dataDir, "store", "objects", w.project, "repo.git.tar.gz")); err != nil {
		t.Fatalf("the durable .git was not persisted: %v", err)
	}
	// The tool loop went through the metered gateway with the runtime token.
	reqs := w.e.upstream.Requests()
	if len(reqs) != 2 || reqs[0].Body["tools"] == nil {
		t.Fatalf("upstream saw %d requests", len(reqs))
	}
	// The reads see the turn's commit.
	req, _ := http.NewRequest(http.MethodGet, w.api.URL+"/api/projects/"+w.project+"/checkpoints/graph", nil)
	req.Header.Set("Authorization", "Bearer "+w.acc.key)
	gres, err := http.DefaultClient.Do(req)
	must(t, err)
	gb, _ := io.ReadAll(gres.Body)
	gres.Body.Close()
	if gres.StatusCode != 200 || !strings.Contains(string(gb), "webhook: please write a note") {
		t.Fatalf("graph after the turn: %d %s", gres.StatusCode, gb)
	}
	// Publish over HTTP tags the head on the pod; the graph shows the badge
	// after the next hydrate, and the project row records it.
	preq, _ := http.NewRequest(http.MethodPost, w.api.URL+"/api/projects/"+w.project+"/publish", strings.NewReader(`{"subdomain":"notes"}`))
	preq.Header.Set("Authorization", "Bearer "+w.acc.key)
	preq.Header.Set("Content-Type", "application/json")
	pres, err := http.DefaultClient.Do(preq)
	must(t, err)
	var pub struct{ SHA, Tag string }
	must(t, json.NewDecoder(pres.Body).Decode(&pub))
	pres.Body.Close()
	if pres.StatusCode != 200 || !strings.HasPrefix(pub.Tag, "publish/notes/") || len(pub.SHA) != 40 {
		t.Fatalf("publish: %d %+v", pres.StatusCode, pub)
	}
	if row := w.e.admin("project", "show", "--id", w.project); row["publishedTag"] != pub.Tag || row["publishedCommitSha"] != pub.SHA {
		t.Fatalf("project row %v", row)
	}
	gres, err = http.DefaultClient.Do(req)
	must(t, err)
	gb, _ = io.ReadAll(gres.Body)
	gres.Body.Close()
	if !strings.Contains(string(gb), pub.Tag) || !strings.Contains(string(gb), `"published":true`) {
		t.Fatalf("graph after publish lacks the Published badge: %s", gb)
	}
	// Activity shows the inbound message and the outbound reply.
	res, body = w.do(t, http.MethodGet, "/agent/channels/webhook/activity", nil, hookHeaders())
	if res.StatusCode != 200 || !strings.Contains(string(body), "inbound") || !strings.Contains(string(body), "outbound") {
		t.Fatalf("activity: %d %s", res.StatusCode, body)
	}
}

// Async mode: 202 at once, then a signed callback with the echoed metadata;
// a receiver that fails twice gets exactly one successful delivery, every
// attempt with the same webhook-id.
func TestWebhookAsyncCallbackEndToEnd(t *testing.T) {
	t.Parallel()
	w, _ := webhookWorld(t)
	w.e.upstream.Script(agentScript("a.txt", "async", "done async", nil))

	type attempt struct {
		status int
		header http.Header
		body   []byte
	}
	var mu sync.Mutex
	var attempts []attempt
	delivered := make(chan struct{})
	recv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		status := http.StatusServiceUnavailable
		if len(attempts) >= 2 {
			status = http.StatusOK
		}
		attempts = append(attempts, attempt{status, r.Header.Clone(), b})
		rw.WriteHeader(status)
		if status == http.StatusOK {
			close(delivered)
		}
	}))
	defer recv.Close()

	res, body := w.do(t, http.MethodPost, "/agent/channels/webhook/incoming",
		[]byte(`{"message":"write a.txt","callback_url":"`+recv.URL+`/hook","metadata":{"run":"r-7"}}`), hookHeaders())
	if res.StatusCode != http.StatusAccepted || !strings.Contains(string(body), `"accepted"`) {
		t.Fatalf("incoming: %d %s", res.StatusCode, body)
	}
	await(t, delivered, "no successful callback delivery")
	mu.Lock()
	defer mu.Unlock()
	if len(attempts) != 3 {
		t.Fatalf("%d attempts, want 2 failures and 1 success", len(attempts))
	}
	id := attempts[0].header.Get("webhook-id")
	wh, err := standardwebhooks.NewWebhookRaw([]byte("hook-secret"))
	must(t, err)
	for i, a := range attempts {
		if a.header.Get("webhook-id") != id || id == "" {
			t.Errorf("attempt %d: webhook-id %q, want %q", i, a.header.Get("webhook-id"), id)
		}
		if err := wh.Verify(a.body, a.header); err != nil {
			t.Errorf("attempt %d: signature: %v", i, err)
		}
		if a.header.Get("X-Team") != "platform" || !strings.HasPrefix(a.header.Get("Content-Type"), "application/json") {
			t.Errorf("attempt %d: headers %v", i, a.header)
		}
	}
	var cb struct {
		Reply         string         `json:"reply"`
		CorrelationID string         `json:"correlationId"`
		Metadata      map[string]any `json:"metadata"`
	}
	must(t, json.Unmarshal(attempts[2].body, &cb))
	if cb.Reply != "done async" || cb.CorrelationID == "" || cb.Metadata["run"] != "r-7" {
		t.Fatalf("callback body %s", attempts[2].body)
	}
}

// A sync request that outlives the reply timeout gets 504 reply_timeout with
// a correlationId; the late reply is then fetched from the outbox: a poll
// waiting before the reply exists returns as soon as it arrives.
func TestWebhookSyncTimeoutGoesToOutbox(t *testing.T) {
	t.Parallel()
	w, channelID, gate := lateReplyWorld(t, "the late reply")

	res, body := w.do(t, http.MethodPost, "/agent/channels/webhook/incoming",
		[]byte(`{"message":"slow job","metadata":{"k":"v"}}`), hookHeaders())
	var env wire.ErrorBody
	_ = json.Unmarshal(body, &env)
	if res.StatusCode != http.StatusGatewayTimeout || env.Error.Code != "reply_timeout" || env.Error.CorrelationID == "" {
		t.Fatalf("want 504 reply_timeout with a correlationId, got %d %s", res.StatusCode, body)
	}
	type polled struct {
		status int
		body   []byte
		took   time.Duration
		err    error
	}
	done := make(chan polled, 1)
	go func() {
		start := time.Now()
		res, body, err := tryDo(http.MethodGet, w.api.URL+"/api/projects/"+w.project+"/agent-proxy/agent/channels/webhook/outbox/"+
			channelID+"?wait=30", w.acc.key, nil, hookHeaders())
		if err != nil {
			done <- polled{err: err}
			return
		}
		done <- polled{res.StatusCode, body, time.Since(start), nil}
	}()
	close(gate) // the agent finishes now
	p := <-done
	if p.err != nil {
		t.Fatalf("outbox poll: %v", p.err)
	}
	if p.status != 200 || !strings.Contains(string(p.body), env.Error.CorrelationID) || !strings.Contains(string(p.body), "the late reply") ||
		!strings.Contains(string(p.body), `"k":"v"`) {
		t.Fatalf("outbox: %d %s", p.status, p.body)
	}
	if p.took >= 25*time.Second {
		t.Fatalf("the poll waited %s: it must return as soon as the reply is in the outbox", p.took)
	}
	// Returned messages are acknowledged: the next poll is empty.
	res, body = w.do(t, http.MethodGet, "/agent/channels/webhook/outbox/"+channelID+"?wait=0", nil, hookHeaders())
	if res.StatusCode != 200 || strings.Contains(string(body), env.Error.CorrelationID) {
		t.Fatalf("outbox after acknowledgement: %d %s", res.StatusCode, body)
	}
}

// Spec 7.2 through the API: refused callbacks and bad bodies never start a turn.
func TestWebhookBadRequestsEndToEnd(t *testing.T) {
	t.Parallel()
	w, _ := webhookWorld(t)
	cases := []struct {
		name, body string
		header     http.Header
		status     int
	}{
		{"no body", ``, hookHeaders(), 400},
		{"message not a string", `{"message":42}`, hookHeaders(), 400},
		{"wrong channel secret", `{"message":"x"}`, http.Header{"X-Webhook-Secret": {"nope"}, "Content-Type": {"application/json"}}, 401},
		{"metadata service callback", `{"message":"x","callbackUrl":"http://169.254.169.254/latest"}`, hookHeaders(), 400},
		{"private callback", `{"message":"x","callbackUrl":"http://10.0.0.1/hook"}`, hookHeaders(), 400},
	}
	for _, tc := range cases {
		res, body := w.do(t, http.MethodPost, "/agent/channels/webhook/incoming", []byte(tc.body), tc.header)
		if res.StatusCode != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, res.StatusCode, body, tc.status)
		}
	}
	if n := len(w.e.upstream.Requests()); n != 0 {
		t.Fatalf("refused requests started %d model calls", n)
	}
}
