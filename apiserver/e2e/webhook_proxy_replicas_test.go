package e2e

// Several API replicas (spec 4.2: "routing is internal"): a paired
// machine's tunnel lives on the replica it dialled; every other replica
// relays the project's agent-proxy requests to that one through
// /internal/projects/{id}/relay/*, and answers 503 instance_offline when the
// machine or its replica is gone.

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/runtimetoken"
	"github.com/svc-dev/svc/shared/wire"
)

func TestWebhookProxyPairedAcrossReplicas(t *testing.T) {
	t.Parallel()
	w := newProxyWorld(t, failingAgentBin(t)) // replica A: the machine dials this one
	// Replica B shares the database, not A's data dir (one owner per data
	// dir).
	b := w.e.startAPI("SVC_PODAGENT_BIN="+failingAgentBin(t), "SVC_DATA_DIR="+t.TempDir(), "SVC_RUNTIME_STOP_GRACE=10s")
	incoming := "/agent/channels/webhook/incoming"
	health := "/agent/channels/webhook/health"
	msg := []byte(`{"message":"hello from another replica","senderId":"e2e"}`)
	hdr := http.Header{"X-Webhook-Secret": {"hook-secret"}, "Content-Type": {"application/json"}}
	w.e.admin("channel", "set", "--project", w.project, "--secret", "hook-secret")
	token := w.e.admin("pairing", "create", "--project", w.project, "--name", "laptop")["token"].(string)
	viaB := func(method, path string, body []byte, h http.Header) (*http.Response, []byte) {
		return proxyDo(t, b.URL, w.project, w.acc.key, method, path, body, h)
	}

	// Not connected anywhere: B answers instance_offline like A.
	if res, rb := viaB(http.MethodPost, incoming, msg, hdr); res.StatusCode != 503 || errCode(t, rb) != "instance_offline" {
		t.Fatalf("B, not connected: %d %s", res.StatusCode, rb)
	}

	paired, _ := startPaired(t, w, token) // dials A
	waitHealth(t, w, w.api.URL, true)
	// A serves through its tunnel, so the assignment already names A: B
	// relays without waiting.
	if ra := w.e.admin("runtime", "show", "--project", w.project); ra["driver"] != "paired" || ra["endpoint"] != w.api.URL {
		t.Fatalf("runtime assignment while connected to A: %v (A is %s)", ra, w.api.URL)
	}
	res, rb := viaB(http.MethodGet, health, nil, nil)
	var hb map[string]any
	if res.StatusCode != http.StatusOK || json.Unmarshal(rb, &hb) != nil || hb["hasSecret"] != true {
		t.Fatalf("health through B: %d %s", res.StatusCode, rb)
	}
	before := len(w.e.upstream.Requests())
	res, rb = viaB(http.MethodPost, incoming, msg, hdr)
	var reply map[string]any
	if res.StatusCode != http.StatusOK || json.Unmarshal(rb, &reply) != nil || reply["reply"] == "" || reply["reply"] == nil {
		t.Fatalf("sync webhook through B: %d %s", res.StatusCode, rb)
	}
	t.Logf("reply through B → A → tunnel: %s", rb)
	if len(w.e.upstream.Requests()) == before {
		t.Error("the relayed turn never reached the model")
	}
	if res, rb := viaB(http.MethodPost, incoming, msg, http.Header{"X-Webhook-Secret": {"nope"}}); res.StatusCode != 401 {
		t.Errorf("wrong channel secret through B: %d %s", res.StatusCode, rb)
	}
	if res, rb := viaB(http.MethodPost, "/agent/git-flush", []byte(`{}`), nil); res.StatusCode != 404 {
		t.Errorf("git-flush through B: %d %s", res.StatusCode, rb)
	}

	// The relay route: the project's runtime token only, the proxied paths
	// only, and only the local tunnel (B holds none: it does not relay again).
	other := w.e.admin("project", "create", "--workspace", w.acc.workspace, "--name", "other")["id"].(string)
	mint := func(id string) string { return runtimetoken.Mint([]byte(e2eRuntimeSecret), id) }
	relay := func(apiURL, project, bearer, method, path string) (*http.Response, []byte) {
		return relayDo(t, apiURL+"/internal/projects/"+project+"/relay"+path, bearer, method)
	}
	for _, c := range []struct {
		name, url, project, bearer, method, path, code string
		status                                         int
	}{
		{"no token", w.api.URL, w.project, "", http.MethodGet, health, "invalid_runtime_token", 401},
		{"member's API key", w.api.URL, w.project, w.acc.key, http.MethodGet, health, "invalid_runtime_token", 401},
		{"other project's token", w.api.URL, w.project, mint(other), http.MethodPost, incoming, "invalid_runtime_token", 401},
		{"other project, own token, no tunnel", w.api.URL, other, mint(other), http.MethodGet, health, "instance_offline", 503},
		{"metrics", w.api.URL, w.project, mint(w.project), http.MethodGet, "/metrics", "not_found", 404},
		{"B has no tunnel: no second hop", b.URL, w.project, mint(w.project), http.MethodGet, health, "instance_offline", 503},
	} {
		res, rb := relay(c.url, c.project, c.bearer, c.method, c.path)
		if res.StatusCode != c.status || errCode(t, rb) != c.code {
			t.Errorf("relay, %s: %d %s, want %d %s", c.name, res.StatusCode, rb, c.status, c.code)
		}
	}
	if res, rb := relay(w.api.URL, w.project, mint(w.project), http.MethodGet, health); res.StatusCode != http.StatusOK {
		t.Errorf("relay on the holder with the project's token: %d %s", res.StatusCode, rb)
	}

	// Publish through B reaches the paired machine's git-flush via A.
	preq, _ := http.NewRequest(http.MethodPost, b.URL+"/api/projects/"+w.project+"/publish", strings.NewReader(`{"subdomain":"paired"}`))
	preq.Header.Set("Authorization", "Bearer "+w.acc.key)
	preq.Header.Set("Content-Type", "application/json")
	pres, err := http.DefaultClient.Do(preq)
	must(t, err)
	pb, _ := io.ReadAll(pres.Body)
	pres.Body.Close()
	if pres.StatusCode != 200 || !strings.Contains(string(pb), `"tag":"publish/paired/`) {
		t.Errorf("publish through B: %d %s", pres.StatusCode, pb)
	}

	// The machine leaves: B answers instance_offline, and A clears itself
	// from the assignment.
	must(t, paired.Process.Signal(os.Interrupt))
	_ = paired.Wait()
	waitHealth(t, w, w.api.URL, false)
	if h := waitHealth(t, w, b.URL, false); h.Reason != wire.HealthOffline {
		t.Fatalf("B's health after the machine left: %+v, want reason offline", h)
	}
	if res, rb := viaB(http.MethodPost, incoming, msg, hdr); res.StatusCode != 503 || errCode(t, rb) != "instance_offline" {
		t.Fatalf("B after the machine left: %d %s", res.StatusCode, rb)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		ra := w.e.admin("runtime", "show", "--project", w.project)
		if ra["driver"] == "paired" && ra["endpoint"] == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("assignment after the machine left: %v", ra)
		}
		time.Sleep(50 * time.Millisecond) // poll with a deadline
	}

	// The holder itself dies (no chance to clear the assignment): B cannot
	// dial it and answers instance_offline, never a 502.
	startPaired(t, w, token)
	waitHealth(t, w, b.URL, true)
	must(t, w.api.cmd.Process.Kill())
	_ = w.api.cmd.Wait()
	if res, rb := viaB(http.MethodPost, incoming, msg, hdr); res.StatusCode != 503 || errCode(t, rb) != "instance_offline" {
		t.Fatalf("B after the holder died: %d %s", res.StatusCode, rb)
	}
}

// relayDo calls a relay route with bearer (none when empty).
func relayDo(t *testing.T, url, bearer, method string) (*http.Response, []byte) {
	t.Helper()
	var h http.Header
	if method == http.MethodPost {
		h = http.Header{"Content-Type": {"application/json"}, "X-Webhook-Secret": {"hook-secret"}}
	}
	return do(t, method, url, bearer, nil, h)
}
