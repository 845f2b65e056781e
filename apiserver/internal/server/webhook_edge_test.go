package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/agentproxy"
	"github.com/svc-dev/svc/apiserver/internal/runtimes"
	"github.com/svc-dev/svc/apiserver/internal/runtimes/local"
	"github.com/svc-dev/svc/apiserver/internal/server"
	"github.com/svc-dev/svc/apiserver/internal/server/servertest"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/shared/testenv/testhttp"
	"github.com/svc-dev/svc/shared/wire"
)

// The webhook channel at the edge: the API checks the channel secret and
// the message's shape before it routes anything, and answers the channel's
// health itself whenever the agent is not serving — and neither a refused
// request nor any number of health polls starts an agent (the local
// driver's start count).

// edgeAgentEnv makes this test binary a stand-in agent for the local driver:
// it serves /readyz (naming its project) and the channel's health on the
// listener the driver hands it (SVC_HTTP_LISTEN_FD).
const edgeAgentEnv = "SERVER_TEST_EDGE_AGENT"

func init() {
	if os.Getenv(edgeAgentEnv) != "1" {
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(wire.PodReadiness{Status: "ready", ProjectID: os.Getenv("SVC_PROJECT_ID")})
	})
	mux.HandleFunc("GET /agent/channels/webhook/health", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(wire.WebhookHealth{Connected: true, HasSecret: true, MessageCount: 1})
	})
	mux.HandleFunc("POST /agent/channels/webhook/incoming", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(wire.WebhookReply{Reply: "ok"})
	})
	fd, _ := strconv.Atoi(os.Getenv("SVC_HTTP_LISTEN_FD"))
	ln, err := net.FileListener(os.NewFile(uintptr(fd), "http-listener"))
	if err == nil {
		err = http.Serve(ln, mux)
	}
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

type edge struct {
	url, key, project string
	drv               *local.Driver
	db                *store.Store
}

// newEdge starts the API in process with the local driver running binary.
func newEdge(t *testing.T, binary string) *edge {
	t.Helper()
	db := storetest.SQLite(t)
	dir := t.TempDir()
	drv := local.New(local.Options{Binary: binary, DataDir: dir, RuntimeSecret: []byte(servertest.RuntimeSecret),
		APIURL: "http://127.0.0.1:1"})
	t.Cleanup(func() { _ = drv.Close(context.Background()) })
	router := &runtimes.Router{Store: db, Default: drv, Instance: "test"}
	srv := servertest.New(t, server.Deps{Store: db,
		AgentProxy: &agentproxy.Proxy{Runtime: router, Channels: db, MaxBodyBytes: 1024}})
	acct := servertest.NewAccount(t, db)
	p, err := db.CreateProject(context.Background(), acct.WorkspaceID, "hook")
	if err != nil {
		t.Fatal(err)
	}
	secret := "whsec_current"
	if _, err := db.SetChannel(context.Background(), p.ID, &secret, nil); err != nil {
		t.Fatal(err)
	}
	return &edge{url: srv.URL, key: acct.Key, project: p.ID, drv: drv, db: db}
}

func (e *edge) do(t *testing.T, method, path, secret, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, e.url+"/api/projects/"+e.project+"/agent-proxy/agent/channels/webhook/"+path,
		strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if secret != "" {
		req.Header.Set(wire.HeaderWebhookSecret, secret)
	}
	req.Header.Set("Content-Type", "application/json")
	res, b := testhttp.Do(t, http.DefaultClient, req, e.key)
	return res.StatusCode, b
}

// health polls the channel's health n times; each must be a 200 with
// connected false and reason.
func (e *edge) health(t *testing.T, n int, reason string, retryAfter bool) {
	t.Helper()
	for i := 0; i < n; i++ {
		code, b := e.do(t, http.MethodGet, "health", "", "")
		var h wire.WebhookHealth
		if code != http.StatusOK || json.Unmarshal(b, &h) != nil {
			t.Fatalf("health: %d %s", code, b)
		}
		if h.Connected || h.Reason != reason || (h.RetryAfter > 0) != retryAfter || !h.HasSecret {
			t.Fatalf("health %s, want connected false, reason %q, retryAfter %v, hasSecret", b, reason, retryAfter)
		}
	}
}

// refused sends what the edge must refuse and checks the status and code.
func (e *edge) refused(t *testing.T) {
	t.Helper()
	for _, c := range []struct {
		name, secret, body string
		status             int
		code               string
	}{
		{"no secret", "", `{"message":"hi"}`, 401, "invalid_webhook_secret"},
		{"wrong secret", "whsec_wrong", `{"message":"hi"}`, 401, "invalid_webhook_secret"},
		{"empty object", "whsec_current", `{}`, 400, "missing_message"},
		{"message not a string", "whsec_current", `{"message":7}`, 400, "invalid_message"},
		{"blank message", "whsec_current", `{"message":"  \n"}`, 400, "invalid_message"},
		{"not JSON", "whsec_current", `hi`, 400, "invalid_json"},
		{"too large", "whsec_current", `{"message":"` + strings.Repeat("x", 2048) + `"}`, 413, "request_too_large"},
		{"bad secret before bad body", "whsec_wrong", `{}`, 401, "invalid_webhook_secret"},
	} {
		code, b := e.do(t, http.MethodPost, "incoming", c.secret, c.body)
		if code != c.status || !strings.Contains(string(b), `"code":"`+c.code+`"`) {
			t.Errorf("%s: %d %s, want %d %s", c.name, code, b, c.status, c.code)
		}
	}
	if code, b := e.do(t, http.MethodGet, "activity", "whsec_wrong", ""); code != 401 {
		t.Errorf("activity with a wrong secret: %d %s", code, b)
	}
}

func edgeAgent(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "edge-agent")
	script := fmt.Sprintf("#!/bin/sh\n%s=1 exec %q \"$@\"\n", edgeAgentEnv, self)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestWebhookEdgeStoppedAndIdleStopped(t *testing.T) {
	t.Parallel()
	e := newEdge(t, edgeAgent(t))
	e.health(t, 20, wire.HealthStopped, false)
	e.refused(t)
	if n := e.drv.Starts(); n != 0 {
		t.Fatalf("%d starts from health polls and refused messages", n)
	}
	// A valid message starts the agent; then health is the agent's own.
	if code, b := e.do(t, http.MethodPost, "incoming", "whsec_current", `{"message":"hi"}`); code != 200 {
		t.Fatalf("message: %d %s", code, b)
	}
	code, b := e.do(t, http.MethodGet, "health", "", "")
	if code != 200 || !strings.Contains(string(b), `"connected":true`) || e.drv.Starts() != 1 {
		t.Fatalf("health of a serving agent: %d %s (starts %d)", code, b, e.drv.Starts())
	}
	// Stopped as the idle reaper stops it: health reports, nothing starts.
	if err := e.drv.Stop(context.Background(), e.project); err != nil {
		t.Fatal(err)
	}
	e.health(t, 20, wire.HealthStopped, false)
	e.refused(t)
	if n := e.drv.Starts(); n != 1 {
		t.Fatalf("%d starts, want the message's 1", n)
	}
}

func TestWebhookEdgeAgentCannotStart(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "broken-podagent")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho 'podagent: cannot start' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	e := newEdge(t, bin)
	e.refused(t)
	if n := e.drv.Starts(); n != 0 {
		t.Fatalf("%d starts from refused messages", n)
	}
	code, b := e.do(t, http.MethodPost, "incoming", "whsec_current", `{"message":"hi"}`)
	if code != 503 || !strings.Contains(string(b), "agent_start_failed") {
		t.Fatalf("message: %d %s", code, b)
	}
	e.health(t, 20, wire.HealthStartFailed, true)
	e.refused(t)
	if n := e.drv.Starts(); n != 1 {
		t.Fatalf("%d starts, want the message's 1", n)
	}
}

func TestWebhookEdgePairedMachineOffline(t *testing.T) {
	t.Parallel()
	e := newEdge(t, edgeAgent(t))
	if _, err := e.db.PinRuntime(context.Background(), store.RuntimeAssignment{ProjectID: e.project,
		Driver: store.DriverPaired, Instance: "pairing-1"}); err != nil {
		t.Fatal(err)
	}
	e.refused(t)
	code, b := e.do(t, http.MethodPost, "incoming", "whsec_current", `{"message":"hi"}`)
	if code != 503 || !strings.Contains(string(b), "instance_offline") {
		t.Fatalf("message: %d %s", code, b)
	}
	e.health(t, 20, wire.HealthOffline, false)
	// A rotation's overlap: the replaced secret passes the edge as the new
	// one does (the request reaches routing: offline); others do not.
	if _, err := e.db.RotateChannelSecret(context.Background(), e.project, "whsec_rotated", time.Hour); err != nil {
		t.Fatal(err)
	}
	for secret, want := range map[string]int{"whsec_rotated": 503, "whsec_current": 503, "whsec_wrong": 401, "": 401} {
		if code, b := e.do(t, http.MethodPost, "incoming", secret, `{"message":"hi"}`); code != want {
			t.Errorf("secret %q during the overlap: %d %s, want %d", secret, code, b, want)
		}
	}
	if n := e.drv.Starts(); n != 0 {
		t.Fatalf("%d starts for a project pinned to a paired machine", n)
	}
}
