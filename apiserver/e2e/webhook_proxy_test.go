package e2e

// The API side of the webhook channel: the agent-proxy's cloud
// auth, forwarding and streaming, the local runtime driver, and failed cold
// starts. Agents are real processes started by the apiserver: the test agent
// of webhook_proxy_agent_test.go, or the real podagent.

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/runtimetoken"
	"github.com/svc-dev/svc/shared/wire"
)

const e2eRuntimeSecret = "e2e-runtime-secret" // SVC_RUNTIME_AUTH_SECRET of baseEnv

// proxyWorld is an apiserver with a member's key and a project.
type proxyWorld struct {
	e       *env
	api     *api
	acc     account
	project string
	dataDir string
}

func newProxyWorld(t *testing.T, podagentBin string, extraEnv ...string) *proxyWorld {
	t.Helper()
	e := newEnv(t)
	w := &proxyWorld{e: e, dataDir: t.TempDir()}
	w.api = e.startAPI(append([]string{"SVC_PODAGENT_BIN=" + podagentBin, "SVC_DATA_DIR=" + w.dataDir,
		"SVC_RUNTIME_STOP_GRACE=10s"}, extraEnv...)...)
	w.acc = e.account("free")
	w.project = e.admin("project", "create", "--workspace", w.acc.workspace, "--name", "hook")["id"].(string)
	return w
}

func (w *proxyWorld) do(t *testing.T, method, path string, body []byte, h http.Header) (*http.Response, []byte) {
	t.Helper()
	return proxyDo(t, w.api.URL, w.project, w.acc.key, method, path, body, h)
}

// seen returns what the test agent has received (starting it if needed).
func (w *proxyWorld) seen(t *testing.T) []seenRequest {
	t.Helper()
	res, body := w.do(t, http.MethodGet, "/agent/channels/test/seen", nil, nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("seen: %d %s", res.StatusCode, body)
	}
	var s []seenRequest
	must(t, json.Unmarshal(body, &s))
	return s
}

func (w *proxyWorld) agentInfo(t *testing.T) fakeAgentInfo {
	t.Helper()
	return fakeAgentInfoOf(t, w.api.URL, w.project, w.acc.key)
}

func TestWebhookProxyCloudAuthFirst(t *testing.T) {
	t.Parallel()
	w := newProxyWorld(t, fakeAgentBin(t))
	if got := w.seen(t); len(got) != 0 { // starts the agent
		t.Fatalf("fresh agent saw %v", got)
	}
	other := w.e.account("free") // a valid key of a user outside the project's workspace
	incoming := "/agent/channels/webhook/incoming"
	body := []byte(`{"message":"hi"}`)
	secret := http.Header{"X-Webhook-Secret": {"s3cret"}}
	cases := []struct {
		name, key, path, code string
		status                int
	}{
		{"no key", "", incoming, "invalid_api_key", 401},
		{"malformed key", "svc_sk_nope", incoming, "invalid_api_key", 401},
		{"unknown key", "svc_sk_aaaaaaaaaaaa_" + strings.Repeat("b", 40), incoming, "invalid_api_key", 401},
		{"runtime token", runtimetoken.Mint([]byte(e2eRuntimeSecret), w.project), incoming, "invalid_api_key", 401},
		{"not a member", other.key, incoming, "project_access_denied", 403},
		{"health, not a member", other.key, "/agent/channels/webhook/health", "project_access_denied", 403},
		{"activity, no key", "", "/agent/channels/webhook/activity", "invalid_api_key", 401},
		{"outbox, no key", "", "/agent/channels/webhook/outbox/ch_1", "invalid_api_key", 401},
		{"outbox, not a member", other.key, "/agent/channels/webhook/outbox/ch_1", "project_access_denied", 403},
	}
	for _, c := range cases {
		method := http.MethodGet
		var b []byte
		if c.path == incoming {
			method, b = http.MethodPost, body
		}
		res, rb := proxyDo(t, w.api.URL, w.project, c.key, method, c.path, b, secret)
		if res.StatusCode != c.status || errCode(t, rb) != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.name, res.StatusCode, rb, c.status, c.code)
		}
	}
	// A project that does not exist is 403 too (no probing for ids).
	res, rb := proxyDo(t, w.api.URL, "prj_doesnotexist", w.acc.key, http.MethodPost, incoming, body, secret)
	if res.StatusCode != 403 {
		t.Errorf("unknown project: %d %s", res.StatusCode, rb)
	}
	if got := w.seen(t); len(got) != 0 {
		t.Fatalf("the agent saw requests that failed cloud auth: %+v", got)
	}
	// Routes other than the channel's and the health probes are not proxied.
	for _, p := range []string{"/agent/git-flush", "/agent/channels/../git-flush", "/agent/channels%2F..%2Fgit-flush", "/metrics"} {
		res, rb := w.do(t, http.MethodPost, p, []byte(`{}`), nil)
		if res.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %d %s, want 404", p, res.StatusCode, rb)
		}
	}
	if got := w.seen(t); len(got) != 0 {
		t.Fatalf("the agent saw requests outside the proxied routes: %+v", got)
	}
}

func TestWebhookProxyForwardsUnchangedAndStreams(t *testing.T) {
	t.Parallel()
	w := newProxyWorld(t, fakeAgentBin(t), "SVC_CALLBACK_ALLOWED_NETS=127.0.0.0/8", "SVC_POD_WEBHOOK_SYNC_TIMEOUT=3s")
	w.e.admin("channel", "set", "--project", w.project, "--secret", "s3cret value")
	body := []byte("{ \"message\" : \"héllo\",\n  \"metadata\": {\"k\": [1, 2.50, null]} }  ")
	h := http.Header{
		"X-Webhook-Secret": {"s3cret value"},
		"Content-Type":     {"application/json"},
		"X-Custom":         {"kept"},
		"Connection":       {"X-Hop"},
		"X-Hop":            {"dropped"},
		"Keep-Alive":       {"timeout=5"},
	}
	res, rb := w.do(t, http.MethodPost, "/agent/channels/webhook/incoming?trace=1&x=%2F", body, h)
	if res.StatusCode != http.StatusOK || res.Header.Get("X-Agent") != "fake" {
		t.Fatalf("incoming: %d %v %s", res.StatusCode, res.Header, rb)
	}
	var reply map[string]string
	must(t, json.Unmarshal(rb, &reply))
	if reply["reply"] != "fake: "+string(body) {
		t.Errorf("reply %q", reply["reply"])
	}
	seen := w.seen(t)
	if len(seen) != 1 {
		t.Fatalf("agent saw %d requests: %+v", len(seen), seen)
	}
	got := seen[0]
	if got.Method != http.MethodPost || got.Path != "/agent/channels/webhook/incoming" || got.Query != "trace=1&x=%2F" {
		t.Errorf("request line: %s %s ? %s", got.Method, got.Path, got.Query)
	}
	if string(got.Body) != string(body) {
		t.Errorf("body changed: %q", got.Body)
	}
	if got.Header.Get("X-Webhook-Secret") != "s3cret value" || got.Header.Get("X-Custom") != "kept" ||
		got.Header.Get("Content-Type") != "application/json" {
		t.Errorf("headers not forwarded: %v", got.Header)
	}
	if want := "Bearer " + runtimetoken.Mint([]byte(e2eRuntimeSecret), w.project); got.Header.Get("Authorization") != want {
		t.Errorf("Authorization toward the agent %q, want the project's runtime token", got.Header.Get("Authorization"))
	}
	if strings.Contains(got.Header.Get("Authorization"), w.acc.key) {
		t.Error("the client's API key reached the agent")
	}
	for _, hop := range []string{"X-Hop", "Keep-Alive", "Connection"} {
		if v := got.Header.Values(hop); len(v) > 0 {
			t.Errorf("hop-by-hop header %s reached the agent: %v", hop, v)
		}
	}

	// The pod's environment (local driver).
	info := w.agentInfo(t)
	wantEnv := map[string]string{
		"SVC_PROJECT_ID":            w.project,
		"SVC_CLOUD_SYNC_MODE":       "git_only",
		"SVC_RUNTIME_TOKEN":         runtimetoken.Mint([]byte(e2eRuntimeSecret), w.project),
		"SVC_API_URL":               w.api.URL,
		"SVC_STORAGE":               "fs",
		"SVC_DATA_DIR":              w.dataDir,
		"SVC_WORKSPACE_DIR":         filepath.Join(w.dataDir, "runtimes", w.project, "workspace"),
		"SVC_CALLBACK_ALLOWED_NETS": "127.0.0.0/8",
		"SVC_WEBHOOK_SYNC_TIMEOUT":  "3s",
	}
	for k, v := range wantEnv {
		if info.Env[k] != v {
			t.Errorf("pod env %s=%q, want %q", k, info.Env[k], v)
		}
	}
	for _, k := range []string{"SVC_RUNTIME_AUTH_SECRET", "SVC_DATABASE_URL", "FAKE_UPSTREAM_KEY", "SVC_MODELS_FILE"} {
		if _, ok := info.Env[k]; ok {
			t.Errorf("pod env holds the API server's %s", k)
		}
	}
	if !strings.HasPrefix(info.Env["SVC_HTTP_ADDR"], "127.0.0.1:") {
		t.Errorf("pod listens on %q", info.Env["SVC_HTTP_ADDR"])
	}
	ra := w.e.admin("runtime", "show", "--project", w.project)
	if ra["driver"] != "local" || ra["endpoint"] != "http://"+info.Env["SVC_HTTP_ADDR"] || ra["cloudSyncMode"] != "git_only" {
		t.Errorf("runtime assignment %v", ra)
	}

	// Streaming: chunk 1 reaches the client while the agent still holds chunk 2.
	req, _ := http.NewRequest(http.MethodGet, w.api.URL+"/api/projects/"+w.project+"/agent-proxy/agent/channels/test/stream", nil)
	req.Header.Set("Authorization", "Bearer "+w.acc.key)
	sres, err := http.DefaultClient.Do(req)
	must(t, err)
	defer sres.Body.Close()
	br := bufio.NewReader(sres.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "chunk-1\n" {
		t.Fatalf("first chunk %q %v", line, err)
	}
	if res, rb := w.do(t, http.MethodPost, "/agent/channels/test/release", nil, nil); res.StatusCode != 200 {
		t.Fatalf("release: %d %s", res.StatusCode, rb)
	}
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "chunk-2\n" {
		t.Fatalf("rest %q %v", rest, err)
	}
}

func TestWebhookProxyNeverRetries(t *testing.T) {
	t.Parallel()
	w := newProxyWorld(t, fakeAgentBin(t))
	w.seen(t) // start the agent; the proxy now holds a kept-alive connection to it
	for _, c := range []struct {
		name string
		body []byte
		h    http.Header
	}{
		{"with a body", []byte(`{"message":"run once"}`), http.Header{"Content-Type": {"application/json"}}},
		// net/http replays a bodiless request that carries an Idempotency-Key.
		{"without a body", nil, http.Header{"Idempotency-Key": {"k1"}}},
	} {
		before := len(w.seen(t))
		res, rb := w.do(t, http.MethodPost, "/agent/channels/test/fail", c.body, c.h)
		if res.StatusCode != http.StatusBadGateway || errCode(t, rb) != "agent_unreachable" {
			t.Errorf("%s: %d %s, want 502 agent_unreachable", c.name, res.StatusCode, rb)
		}
		n := 0
		for _, s := range w.seen(t)[before:] {
			if s.Path == "/agent/channels/test/fail" {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s: the agent received the failed POST %d times, want 1", c.name, n)
		}
	}
}

func TestWebhookProxyLocalDriverLifecycle(t *testing.T) {
	t.Parallel()
	w := newProxyWorld(t, fakeAgentBin(t))
	first := w.agentInfo(t)

	// Concurrent first requests of another project start one agent.
	p2 := w.e.admin("project", "create", "--workspace", w.acc.workspace, "--name", "two")["id"].(string)
	var wg sync.WaitGroup
	pids := make(chan int, 4)
	for range 4 {
		wg.Go(func() {
			res, body, err := tryDo(http.MethodGet, w.api.URL+"/api/projects/"+p2+"/agent-proxy/agent/channels/test/env",
				w.acc.key, nil, nil)
			if err != nil {
				t.Errorf("concurrent start: %v", err)
				return
			}
			var info fakeAgentInfo
			if res.StatusCode == 200 && json.Unmarshal(body, &info) == nil {
				pids <- info.PID
			} else {
				t.Errorf("concurrent start: %d %s", res.StatusCode, body)
			}
		})
	}
	wg.Wait()
	close(pids)
	var p2pid int
	for pid := range pids {
		if p2pid != 0 && pid != p2pid {
			t.Fatalf("one project got two agents: %d and %d", p2pid, pid)
		}
		p2pid = pid
	}
	if p2pid == first.PID {
		t.Fatal("two projects share one agent")
	}

	// A dead agent is started again by the next request.
	must(t, syscall.Kill(first.PID, syscall.SIGKILL))
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, body := w.do(t, http.MethodGet, "/agent/channels/test/env", nil, nil)
		var info fakeAgentInfo
		if res.StatusCode == 200 && json.Unmarshal(body, &info) == nil && info.PID != first.PID {
			break
		}
		// Until the driver has seen the exit, the request may reach the dead port.
		if res.StatusCode != 200 && res.StatusCode != http.StatusBadGateway {
			t.Fatalf("after the agent died: %d %s", res.StatusCode, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dead agent was not restarted: %d %s", res.StatusCode, body)
		}
		time.Sleep(20 * time.Millisecond) // poll with a deadline
	}
	second := w.agentInfo(t)

	// Shutting the API server down stops its agents.
	must(t, w.api.cmd.Process.Signal(os.Interrupt))
	_ = w.api.cmd.Wait()
	for _, pid := range []int{second.PID, p2pid} {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("agent %d still runs after the API server stopped (%v)", pid, err)
		}
	}
}

func TestWebhookProxyAgentStartFailed(t *testing.T) {
	t.Parallel()
	secret := http.Header{"X-Webhook-Secret": {"hook-secret"}}
	for _, bin := range []string{failingAgentBin(t), filepath.Join(t.TempDir(), "no-such-podagent")} {
		w := newProxyWorld(t, bin)
		w.e.admin("channel", "set", "--project", w.project, "--secret", "hook-secret")
		res, rb := w.do(t, http.MethodPost, "/agent/channels/webhook/incoming", []byte(`{"message":"hi"}`), secret)
		if res.StatusCode != http.StatusServiceUnavailable || errCode(t, rb) != "agent_start_failed" {
			t.Fatalf("%s: %d %s, want 503 agent_start_failed", bin, res.StatusCode, rb)
		}
		if res.Header.Get("Retry-After") == "" {
			t.Errorf("%s: no Retry-After on a retryable failure", bin)
		}
		// Health reports the failed start (a 200), with when to retry.
		res, rb = w.do(t, http.MethodGet, "/agent/channels/webhook/health", nil, nil)
		var h wire.WebhookHealth
		if res.StatusCode != http.StatusOK || json.Unmarshal(rb, &h) != nil || h.Connected ||
			h.Reason != wire.HealthStartFailed || h.RetryAfter < 1 || !h.HasSecret {
			t.Fatalf("%s: health %d %s, want 200 start_failed with retryAfter", bin, res.StatusCode, rb)
		}
	}
}

func TestWebhookProxyLocalPodagent(t *testing.T) {
	t.Parallel()
	w := newProxyWorld(t, podagentBin(t))
	// /readyz exists on the pod only: an answer proves the request reached it.
	res, rb := w.do(t, http.MethodGet, "/readyz", nil, nil)
	if res.StatusCode != http.StatusOK || !strings.Contains(string(rb), `"ready"`) {
		t.Fatalf("pod /readyz through the proxy: %d %s", res.StatusCode, rb)
	}
	res, rb = w.do(t, http.MethodGet, "/agent/channels/webhook/health", nil, nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("health: %d %s", res.StatusCode, rb)
	}
	var health map[string]any
	must(t, json.Unmarshal(rb, &health))
	if _, ok := health["hasSecret"]; !ok || health["hasSecret"] != false {
		t.Errorf("health %v", health)
	}
	// The pod owns its workspace under the data dir.
	if _, err := os.Stat(filepath.Join(w.dataDir, "runtimes", w.project, "workspace", ".git")); err != nil {
		t.Errorf("pod workspace: %v", err)
	}
	if ra := w.e.admin("runtime", "show", "--project", w.project); ra["driver"] != "local" {
		t.Errorf("runtime assignment %v", ra)
	}
	// A channel secret set by the admin CLI reaches the running pod.
	w.e.admin("channel", "set", "--project", w.project, "--secret", "hook-secret")
	res, rb = w.do(t, http.MethodPost, "/agent/channels/webhook/incoming", []byte(`{"message":"hello pod"}`),
		http.Header{"X-Webhook-Secret": {"wrong"}, "Content-Type": {"application/json"}})
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("wrong channel secret: %d %s, want the agent's 401", res.StatusCode, rb)
	}
}

// podagentBin is the real podagent (binaries_test.go).
func podagentBin(t *testing.T) string {
	t.Helper()
	p, err := podagentBinary()
	if err != nil {
		t.Fatalf("building podagent: %v", err)
	}
	return p
}
