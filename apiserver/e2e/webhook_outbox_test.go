package e2e

// The durable webhook outbox (docs/design.md §6): the pod hands late replies to
// the API, which keeps them in its database and serves the integrations'
// long-poll itself, so a reply survives the pod and is fetched while no
// agent runs.

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/wire"
)

// waitOutboxRow polls the database until the API has the message (a poll
// with a deadline: the pod hands it over in the background).
func waitOutboxRow(t *testing.T, dbURL, projectID, channelID string) {
	t.Helper()
	st, err := store.Open(dbURL, "")
	must(t, err)
	defer st.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := st.CountOutbox(context.Background(), projectID, channelID)
		must(t, err)
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the pod did not hand the late reply to the API")
		}
		time.Sleep(20 * time.Millisecond) // poll with a deadline
	}
}

// A late sync reply reaches the API's database; the pod and the API server
// that started it stop; a new API server, whose agent cannot even start,
// still serves the reply from the outbox.
func TestWebhookOutboxSurvivesThePod(t *testing.T) {
	t.Parallel()
	w, channelID, gate := lateReplyWorld(t, "the reply after the pod")
	res, body := w.do(t, http.MethodPost, "/agent/channels/webhook/incoming",
		[]byte(`{"message":"slow job","metadata":{"ticket":7}}`), hookHeaders())
	if res.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("want 504 reply_timeout, got %d %s", res.StatusCode, body)
	}
	var env wire.ErrorBody
	must(t, json.Unmarshal(body, &env))
	close(gate)
	waitOutboxRow(t, w.e.dbURL, w.project, channelID)
	// Health counts the reply while the API's outbox holds it, also once
	// the pod's copy is handed over (it used to say 0 then).
	for deadline := time.Now().Add(30 * time.Second); ; {
		res, body := w.do(t, http.MethodGet, "/agent/channels/webhook/health", nil, nil)
		var h wire.WebhookHealth
		if res.StatusCode == http.StatusOK && json.Unmarshal(body, &h) == nil && h.OutboxPending == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("health: %d %s, want outboxPending 1", res.StatusCode, body)
		}
		time.Sleep(25 * time.Millisecond) // the pod drops its copy once the API answered: poll with a deadline
	}

	// Stop the API server; it stops its pod.
	must(t, w.api.cmd.Process.Signal(os.Interrupt))
	_ = w.api.cmd.Wait()
	w.api = w.e.startAPI("SVC_PODAGENT_BIN="+filepath.Join(t.TempDir(), "no-podagent"), "SVC_DATA_DIR="+w.dataDir)
	// Health reports (and starts nothing): no agent runs, and the API's
	// outbox still holds the reply.
	res, body = w.do(t, http.MethodGet, "/agent/channels/webhook/health", nil, nil)
	var down wire.WebhookHealth
	if res.StatusCode != http.StatusOK || json.Unmarshal(body, &down) != nil || down.Connected ||
		down.Reason != wire.HealthStopped || down.OutboxPending != 1 {
		t.Fatalf("health with no agent: %d %s, want 200 connected false, reason stopped, outboxPending 1", res.StatusCode, body)
	}
	res, body = w.do(t, http.MethodGet, "/agent/channels/webhook/outbox/"+channelID+"?wait=5", nil, hookHeaders())
	var ob wire.OutboxResponse
	if res.StatusCode != 200 || json.Unmarshal(body, &ob) != nil || len(ob.Messages) != 1 {
		t.Fatalf("outbox with the pod gone: %d %s", res.StatusCode, body)
	}
	m := ob.Messages[0]
	if m.CorrelationID != env.Error.CorrelationID || m.Reply != "the reply after the pod" || string(m.Metadata) != `{"ticket":7}` ||
		m.ID == "" || m.CreatedAt.IsZero() {
		t.Fatalf("outbox message %+v", m)
	}
	res, body = w.do(t, http.MethodGet, "/agent/channels/webhook/outbox/"+channelID, nil, hookHeaders())
	if res.StatusCode != 200 || string(body) != "{\"messages\":[]}\n" {
		t.Fatalf("acknowledged: %d %s", res.StatusCode, body)
	}
}

// Spec 5.2 and 7.2 on the outbox path, answered by the API alone (the agent
// binary cannot start): cloud auth, then channel auth, then the channel id.
func TestWebhookOutboxAuthMatrix(t *testing.T) {
	t.Parallel()
	w := newProxyWorld(t, failingAgentBin(t))
	ch := w.e.admin("channel", "set", "--project", w.project, "--secret", "hook-secret")["channelId"].(string)
	other := w.e.admin("project", "create", "--workspace", w.acc.workspace, "--name", "other")["id"].(string)
	otherCh := w.e.admin("channel", "set", "--project", other, "--secret", "other-secret")["channelId"].(string)
	noSecret := w.e.admin("project", "create", "--workspace", w.acc.workspace, "--name", "no-secret")["id"].(string)
	// An explicitly empty secret (without --secret a new channel gets a generated one).
	noSecretCh := w.e.admin("channel", "set", "--project", noSecret, "--secret", "")["channelId"].(string)
	noChannel := w.e.admin("project", "create", "--workspace", w.acc.workspace, "--name", "no-channel")["id"].(string)
	stranger := w.e.account("free")

	path := func(c string) string { return "/agent/channels/webhook/outbox/" + c }
	secret := func(s string) http.Header { return http.Header{wire.HeaderWebhookSecret: {s}} }
	cases := []struct {
		name, project, key, path string
		header                   http.Header
		status                   int
		code                     string
	}{
		{"no key", w.project, "", path(ch), secret("hook-secret"), 401, "invalid_api_key"},
		{"not a member", w.project, stranger.key, path(ch), secret("hook-secret"), 403, "project_access_denied"},
		{"no channel secret header", w.project, w.acc.key, path(ch), nil, 401, "invalid_webhook_secret"},
		{"wrong channel secret", w.project, w.acc.key, path(ch), secret("other-secret"), 401, "invalid_webhook_secret"},
		{"another project's channel", w.project, w.acc.key, path(otherCh), secret("hook-secret"), 404, "channel_not_found"},
		{"empty channel secret", noSecret, w.acc.key, path(noSecretCh), secret(""), 401, "channel_secret_not_set"},
		{"no channel", noChannel, w.acc.key, path(ch), secret("hook-secret"), 401, "channel_secret_not_set"},
		{"bad wait", w.project, w.acc.key, path(ch) + "?wait=soon", secret("hook-secret"), 400, "invalid_wait"},
	}
	for _, c := range cases {
		res, body := proxyDo(t, w.api.URL, c.project, c.key, http.MethodGet, c.path, nil, c.header)
		if res.StatusCode != c.status || errCode(t, body) != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.name, res.StatusCode, body, c.status, c.code)
		}
	}
	res, body := w.do(t, http.MethodGet, path(ch)+"?wait=0", nil, secret("hook-secret"))
	if res.StatusCode != 200 || string(body) != "{\"messages\":[]}\n" {
		t.Fatalf("authorized poll: %d %s", res.StatusCode, body)
	}
	// Nothing of this needed (or tried to start) the agent, which cannot start.
	res, body = w.do(t, http.MethodGet, "/agent/channels/webhook/health", nil, nil)
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), `"reason":"stopped"`) {
		t.Fatalf("health: %d %s, want 200 reason stopped", res.StatusCode, body)
	}
}
