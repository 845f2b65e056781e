// Package e2e drives real apiserver processes from the outside: real
// PostgreSQL (shared/testenv), the official openai-go SDK as the client, and
// an OpenAI-compatible fake upstream (shared/testenv/fakeupstream) for the model.
package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/testenv/fakeupstream"
)

var apiserverBin string

func TestMain(m *testing.M) {
	if os.Getenv(bareProxyEnv) != "" {
		os.Exit(runBareProxy()) // the gateway benchmarks' floor (bench_proxy_test.go)
	}
	bin, err := buildAPIServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building apiserver:", err)
		os.Exit(1)
	}
	apiserverBin = bin
	testenv.Main(m)
}

// buildAPIServer uses $SVC_BIN_DIR/apiserver when make built it, else builds.
func buildAPIServer() (string, error) {
	if dir := os.Getenv("SVC_BIN_DIR"); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "apiserver")); err == nil {
			return filepath.Join(dir, "apiserver"), nil
		}
	}
	_, file, _, _ := runtime.Caller(0)
	out := filepath.Join(os.TempDir(), fmt.Sprintf("svc-e2e-apiserver-%d", os.Getpid()))
	cmd := exec.Command("go", "build", "-o", out, "./cmd/apiserver")
	cmd.Dir = filepath.Join(filepath.Dir(file), "..")
	cmd.Stderr = os.Stderr
	return out, cmd.Run()
}

// env is one test's world: a database, a fake upstream and catalog files.
type env struct {
	t        testing.TB
	dbURL    string
	upstream *fakeupstream.Server
	models   string
	plans    string
}

const plansYAML = `plans:
  - {name: free, tiers: [standard], rpm: 1000, workspace_rpm: 5000,
     windows: [{name: 5h, duration: 5h, credits: 100}, {name: month, duration: 720h, credits: 1000}]}
  - {name: tiny, tiers: [standard], rpm: 1000, windows: [{name: 5h, duration: 5h, credits: 0.0001}]}
  - {name: slow, tiers: [standard], rpm: 3, windows: [{name: 5h, duration: 5h, credits: 100}]}
  - {name: pro, tiers: [standard, premium], rpm: 1000, windows: [{name: 5h, duration: 5h, credits: 100}]}
  - {name: bench, tiers: [standard], rpm: 1000000000, workspace_rpm: 1000000000,
     windows: [{name: 5h, duration: 5h, credits: 1000000000}, {name: month, duration: 720h, credits: 1000000000}]}
`

func newEnv(t testing.TB) *env {
	t.Helper()
	e := &env{t: t, dbURL: storetest.PostgresURL(t), upstream: fakeupstream.New(t)}
	dir := t.TempDir()
	e.models = filepath.Join(dir, "models.yaml")
	e.plans = filepath.Join(dir, "plans.yaml")
	e.writeModels()
	must(t, os.WriteFile(e.plans, []byte(plansYAML), 0o600))
	return e
}

// startAPIWithModels rewrites the models file for the current fake upstream
// and starts a new apiserver on it.
func (e *env) startAPIWithModels(extraEnv ...string) *api {
	e.writeModels()
	return e.startAPI(extraEnv...)
}

func (e *env) writeModels() {
	models := fmt.Sprintf(`providers:
  - {name: main, type: openai, base_url: %q, api_key_env: FAKE_UPSTREAM_KEY}
models:
  - {id: svc-2-0, display_name: "SVC 2.0", aliases: [svc-2.0], tier: standard, provider: main, created: 2025-09-01,
     upstream_model: up-2, reasoning_effort: medium,
     price: {input_per_mtok: 3, output_per_mtok: 15, cached_input_per_mtok: 0.3, cache_write_per_mtok: 3.75}}
  - {id: svc-1-0, display_name: "SVC 1.0", legacy: true, tier: standard, provider: main, upstream_model: up-1,
     price: {input_per_mtok: 1, output_per_mtok: 4}}
  - {id: svc-premium, display_name: "SVC Premium", tier: premium, provider: main, upstream_model: up-p}
`, e.upstream.BaseURL())
	must(e.t, os.WriteFile(e.models, []byte(models), 0o600))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (e *env) baseEnv() []string {
	return append(os.Environ(),
		"SVC_DATABASE_URL="+e.dbURL, "SVC_MODELS_FILE="+e.models, "SVC_PLANS_FILE="+e.plans,
		"SVC_DATA_DIR="+e.t.TempDir(), "SVC_RUNTIME_AUTH_SECRET=e2e-runtime-secret",
		"FAKE_UPSTREAM_KEY=upstream-secret", "SVC_LOG_LEVEL=warn")
}

// admin runs `apiserver admin …` and decodes its JSON answer.
func (e *env) admin(args ...string) map[string]any {
	e.t.Helper()
	return testenv.Admin(e.t, apiserverBin, e.baseEnv(), args...)
}

// account is a workspace with a member and a key.
type account struct {
	workspace, user, keyID, key string
}

func (e *env) account(plan string) account {
	e.t.Helper()
	ws := e.admin("workspace", "create", "--name", "acme", "--plan", plan)["id"].(string)
	u := e.admin("user", "create", "--email", fmt.Sprintf("%d@acme.test", time.Now().UnixNano()))["id"].(string)
	e.admin("member", "add", "--workspace", ws, "--user", u)
	k := e.admin("key", "create", "--workspace", ws, "--user", u, "--name", "test")
	return account{workspace: ws, user: u, keyID: k["id"].(string), key: k["key"].(string)}
}

// api is a running apiserver process.
type api struct {
	URL string
	cmd *exec.Cmd
}

func (e *env) startAPI(extraEnv ...string) *api {
	e.t.Helper()
	// A port FreePort found free can be taken before the server binds it
	// (another process's outgoing connection): start again on another one.
	for attempt := 1; ; attempt++ {
		port, err := testenv.FreePort()
		must(e.t, err)
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		cmd := exec.Command(apiserverBin, "serve")
		cmd.Env = append(append(e.baseEnv(), "SVC_HTTP_ADDR="+addr), extraEnv...)
		logs := startProcess(e.t, "apiserver", cmd)
		a := &api{URL: "http://" + addr, cmd: cmd}
		if waitReadyOrPortTaken(e.t, "apiserver", a.URL+"/readyz", 20*time.Second, logs) {
			return a
		}
		if attempt == 3 {
			e.t.Fatalf("apiserver: three picked ports were taken before it bound them\n%s", logs.String())
		}
		e.t.Logf("apiserver: port %d was taken before it bound it; starting on another", port)
	}
}

// await returns what ch delivers, failing the test with what when nothing
// comes within a minute (a callback's delivery).
func await[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	var v T
	select {
	case v = <-ch:
	case <-time.After(60 * time.Second):
		t.Fatal(what)
	}
	return v
}

// freeAccount is the set-up of most gateway tests: an environment, one API
// process and an account on the free plan.
func freeAccount(t testing.TB) (*env, *api, account) {
	t.Helper()
	e := newEnv(t)
	return e, e.startAPI(), e.account("free")
}

// client is the official SDK pointed at base (…/api/v1 or …/v1).
func client(base, key string) *openai.Client {
	c := openai.NewClient(option.WithBaseURL(base+"/"), option.WithAPIKey(key), option.WithMaxRetries(0),
		option.WithRequestTimeout(30*time.Second), option.WithMiddleware(openAPIMiddleware))
	return &c
}

// rawPost sends a body as-is and returns status, headers and decoded error.
func rawPost(t *testing.T, url, key, contentType string, body []byte) (*http.Response, map[string]any) {
	t.Helper()
	var h http.Header
	if contentType != "" {
		h = http.Header{"Content-Type": {contentType}}
	}
	resp, b := do(t, http.MethodPost, url, key, body, h)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return resp, m
}

func userMsg(s string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: "svc-2-0",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(s)}}
}

func errFields(m map[string]any) (typ, code string) {
	e, _ := m["error"].(map[string]any)
	typ, _ = e["type"].(string)
	code, _ = e["code"].(string)
	return
}
