package e2e

// A test agent for the agent-proxy tests: the e2e test binary itself, run by
// the local runtime driver through a wrapper script that sets
// E2E_FAKE_AGENT=1 (init runs before TestMain and never returns then). It
// serves the pod's surface (/readyz, /agent/*) on the listener the driver
// hands it (SVC_HTTP_LISTEN_FD) or SVC_HTTP_ADDR, records every
// request it receives, and has introspection routes under
// /agent/channels/test/ that are not recorded.

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/svc-dev/svc/shared/wire"
)

const fakeAgentEnv = "E2E_FAKE_AGENT"

func init() {
	if os.Getenv(fakeAgentEnv) == "1" {
		os.Exit(runFakeAgent())
	}
}

// seenRequest is one request as the agent received it.
type seenRequest struct {
	Method string      `json:"method"`
	Path   string      `json:"path"`
	Query  string      `json:"query"`
	Header http.Header `json:"header"`
	Body   []byte      `json:"body"`
}

// fakeAgentInfo is GET /agent/channels/test/env.
type fakeAgentInfo struct {
	PID int               `json:"pid"`
	Env map[string]string `json:"env"`
}

func runFakeAgent() int {
	var (
		mu      sync.Mutex
		seen    []seenRequest
		release = make(chan struct{})
		once    sync.Once
	)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(wire.PodReadiness{Status: "ready", ProjectID: os.Getenv("SVC_PROJECT_ID")})
	})
	mux.HandleFunc("GET /agent/channels/test/seen", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		_ = json.NewEncoder(w).Encode(append([]seenRequest{}, seen...))
	})
	mux.HandleFunc("GET /agent/channels/test/env", func(w http.ResponseWriter, r *http.Request) {
		env := map[string]string{}
		for _, kv := range os.Environ() {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		_ = json.NewEncoder(w).Encode(fakeAgentInfo{PID: os.Getpid(), Env: env})
	})
	mux.HandleFunc("POST /agent/channels/test/release", func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(release) })
	})
	mux.HandleFunc("/agent/", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, seenRequest{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body})
		mu.Unlock()
		switch r.URL.Path {
		case "/agent/channels/test/fail":
			// The agent dies mid-request: no answer, the connection drops.
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		case "/agent/channels/test/stream":
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, "chunk-1\n")
			_ = http.NewResponseController(w).Flush()
			<-release // the test releases the rest only after reading chunk 1
			_, _ = io.WriteString(w, "chunk-2\n")
		default:
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Agent", "fake")
			w.WriteHeader(http.StatusOK)
			_ = json.NewEncoder(w).Encode(map[string]any{"reply": "fake: " + string(body)})
		}
	})
	var (
		ln  net.Listener
		err error
	)
	if fd, _ := strconv.Atoi(os.Getenv("SVC_HTTP_LISTEN_FD")); fd > 0 {
		ln, err = net.FileListener(os.NewFile(uintptr(fd), "http-listener"))
	} else {
		ln, err = net.Listen("tcp", os.Getenv("SVC_HTTP_ADDR"))
	}
	if err == nil {
		err = http.Serve(ln, mux)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake agent:", err)
		return 1
	}
	return 0
}

// fakeAgentBin writes a podagent stand-in: a script that runs this test
// binary as the fake agent.
func fakeAgentBin(t testing.TB) string {
	t.Helper()
	self, err := os.Executable()
	must(t, err)
	path := filepath.Join(t.TempDir(), "fake-podagent")
	script := fmt.Sprintf("#!/bin/sh\n%s=1 exec %q \"$@\"\n", fakeAgentEnv, self)
	must(t, os.WriteFile(path, []byte(script), 0o755))
	return path
}

// failingAgentBin writes a podagent stand-in that exits at once.
func failingAgentBin(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "broken-podagent")
	must(t, os.WriteFile(path, []byte("#!/bin/sh\necho 'podagent: cannot start' >&2\nexit 1\n"), 0o755))
	return path
}

// proxyDo sends one request to the agent-proxy of project.
func proxyDo(t testing.TB, apiURL, project, key, method, path string, body []byte, header http.Header) (*http.Response, []byte) {
	t.Helper()
	return do(t, method, apiURL+"/api/projects/"+project+"/agent-proxy"+path, key, body, header)
}

func errCode(t testing.TB, body []byte) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("error body %q: %v", body, err)
	}
	_, code := errFields(m)
	return code
}

// fakeAgentInfoOf asks the test agent of project for its pid and environment.
func fakeAgentInfoOf(t testing.TB, apiURL, project, key string) fakeAgentInfo {
	t.Helper()
	res, body := proxyDo(t, apiURL, project, key, http.MethodGet, "/agent/channels/test/env", nil, nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("env: %d %s", res.StatusCode, body)
	}
	var info fakeAgentInfo
	must(t, json.Unmarshal(body, &info))
	return info
}
