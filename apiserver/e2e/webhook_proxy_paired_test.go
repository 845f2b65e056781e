package e2e

// Paired machines: `podagent paired` dials out to the API through a
// websocket tunnel and serves the project's agent at the same webhook URL; a
// project pinned to a paired machine that is not connected is 503
// instance_offline, and its health a 200 with connected false and reason
// offline.

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/wire"
)

// startPaired runs `podagent paired` for a pairing token; logs shows its output.
func startPaired(t *testing.T, w *proxyWorld, token string) (*exec.Cmd, *logBuffer) {
	t.Helper()
	cmd := exec.Command(podagentBin(t), "paired", "--api", w.api.URL, "--token", token)
	cmd.Env = append(os.Environ(), "SVC_DATA_DIR="+w.dataDir, "SVC_WORKSPACE_DIR="+t.TempDir(), "SVC_LOG_LEVEL=info")
	return cmd, startProcess(t, "podagent paired", cmd)
}

// waitHealth polls the channel's health through the apiserver at apiURL
// until connected is as wanted (a poll with a deadline): health is always a
// 200 that reports.
func waitHealth(t *testing.T, w *proxyWorld, apiURL string, connected bool) wire.WebhookHealth {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		res, body := proxyDo(t, apiURL, w.project, w.acc.key, http.MethodGet, "/agent/channels/webhook/health", nil, nil)
		var h wire.WebhookHealth
		if res.StatusCode != http.StatusOK || json.Unmarshal(body, &h) != nil {
			t.Fatalf("health: %d %s, want a 200 that reports", res.StatusCode, body)
		}
		if h.Connected == connected {
			return h
		}
		if time.Now().After(deadline) {
			t.Fatalf("health: %s, waiting for connected %v", body, connected)
		}
		time.Sleep(25 * time.Millisecond) // poll with a deadline
	}
}

func TestWebhookProxyPairedMachine(t *testing.T) {
	t.Parallel()
	// The local driver cannot start an agent here: whatever answers comes
	// through the tunnel.
	w := newProxyWorld(t, failingAgentBin(t))
	incoming := "/agent/channels/webhook/incoming"
	msg := []byte(`{"message":"hello from the paired test","senderId":"e2e"}`)
	hdr := http.Header{"X-Webhook-Secret": {"hook-secret"}, "Content-Type": {"application/json"}}
	w.e.admin("channel", "set", "--project", w.project, "--secret", "hook-secret")

	pc := w.e.admin("pairing", "create", "--project", w.project, "--name", "laptop")
	token, pairingID := pc["token"].(string), pc["id"].(string)
	if !strings.HasPrefix(token, "svc_pt_") || pc["prefix"] == "" {
		t.Fatalf("pairing create: %v", pc)
	}
	if ra := w.e.admin("runtime", "show", "--project", w.project); ra["driver"] != "paired" || ra["instance"] != pairingID {
		t.Fatalf("runtime assignment after pairing: %v", ra)
	}
	// Pinned but not connected: instance_offline, after cloud auth.
	res, rb := w.do(t, http.MethodPost, incoming, msg, hdr)
	if res.StatusCode != http.StatusServiceUnavailable || errCode(t, rb) != "instance_offline" {
		t.Fatalf("not connected: %d %s, want 503 instance_offline", res.StatusCode, rb)
	}
	if res, rb := proxyDo(t, w.api.URL, w.project, "", http.MethodPost, incoming, msg, hdr); res.StatusCode != 401 {
		t.Fatalf("no key on a paired project: %d %s", res.StatusCode, rb)
	}
	// The tunnel refuses a wrong token.
	req, _ := http.NewRequest(http.MethodGet, w.api.URL+"/api/pairing/session", nil)
	req.Header.Set("Authorization", "Bearer "+w.acc.key)
	sres, err := http.DefaultClient.Do(req)
	must(t, err)
	sres.Body.Close()
	if sres.StatusCode != http.StatusUnauthorized {
		t.Fatalf("session with an API key: %d", sres.StatusCode)
	}

	paired, _ := startPaired(t, w, token)
	if h := waitHealth(t, w, w.api.URL, true); !h.HasSecret {
		t.Errorf("health through the tunnel: %+v", h)
	}
	// The same incoming URL, served by the paired machine: a sync reply from
	// the agent's tool loop (which calls the API's gateway with its runtime token).
	res, rb = w.do(t, http.MethodPost, incoming, msg, hdr)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("incoming through the tunnel: %d %s", res.StatusCode, rb)
	}
	var reply map[string]any
	must(t, json.Unmarshal(rb, &reply))
	t.Logf("reply through the tunnel: %s", rb)
	if r, _ := reply["reply"].(string); r == "" {
		t.Errorf("reply %s", rb)
	}
	if len(w.e.upstream.Requests()) == 0 {
		t.Error("the paired agent's turn never reached the model")
	}
	// The channel secret is checked by the API, and by the agent again.
	if res, rb := w.do(t, http.MethodPost, incoming, msg, http.Header{"X-Webhook-Secret": {"nope"}}); res.StatusCode != 401 {
		t.Errorf("wrong channel secret through the tunnel: %d %s", res.StatusCode, rb)
	}
	if ra := w.e.admin("runtime", "show", "--project", w.project); ra["driver"] != "paired" {
		t.Errorf("runtime assignment while connected: %v", ra)
	}

	// The machine goes away: offline again.
	must(t, paired.Process.Signal(os.Interrupt))
	_ = paired.Wait()
	if h := waitHealth(t, w, w.api.URL, false); h.Reason != wire.HealthOffline {
		t.Fatalf("health after the machine left: %+v, want reason offline", h)
	}
	if res, rb := w.do(t, http.MethodPost, incoming, msg, hdr); res.StatusCode != 503 || errCode(t, rb) != "instance_offline" {
		t.Fatalf("after the machine left: %d %s, want 503 instance_offline", res.StatusCode, rb)
	}

	// Revoking the token unpins the project (back to the default driver) and
	// the machine can no longer connect.
	w.e.admin("pairing", "revoke", "--id", pairingID)
	if h := waitHealth(t, w, w.api.URL, false); h.Reason != wire.HealthStopped {
		t.Fatalf("health after revoke: %+v, want the local driver's stopped", h)
	}
	res, rb = w.do(t, http.MethodPost, incoming, msg, hdr)
	if res.StatusCode != http.StatusServiceUnavailable || errCode(t, rb) != "agent_start_failed" {
		t.Fatalf("after revoke: %d %s, want the local driver's agent_start_failed", res.StatusCode, rb)
	}
	again, logs := startPaired(t, w, token)
	err = again.Wait()
	var ee *exec.ExitError
	if err == nil || !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("podagent paired with a revoked token: %v\n%s", err, logs)
	}
}
