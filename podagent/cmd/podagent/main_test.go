package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

	"github.com/svc-dev/svc/shared/archive/archivetest"

	"github.com/svc-dev/svc/shared/archive"
	"github.com/svc-dev/svc/shared/objstore"
	fsstore "github.com/svc-dev/svc/shared/objstore/fs"
	s3store "github.com/svc-dev/svc/shared/objstore/s3"
	"github.com/svc-dev/svc/shared/repoarchive"
	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/testenv/testfile"
	"github.com/svc-dev/svc/shared/wire"
)

var podagentBin string

// TestMain builds the real binary once; the tests run it as a process.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "podagent-bin-")
	if err != nil {
		panic(err)
	}
	podagentBin = filepath.Join(dir, "podagent")
	if out, err := exec.Command("go", "build", "-o", podagentBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building podagent: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	testenv.Teardown()
	os.RemoveAll(dir)
	os.Exit(code)
}

const token = "svc_rt_p1.process-test-token"

type api struct {
	srv  *httptest.Server
	mu   sync.Mutex
	rows []wire.CheckpointRecord
	seen map[string]bool
}

func newAPI(t *testing.T) *api {
	a := &api{seen: map[string]bool{}}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token || r.URL.Path != "/internal/projects/p1/checkpoints/record" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var rec wire.CheckpointRecord
		json.NewDecoder(r.Body).Decode(&rec)
		a.mu.Lock()
		if !a.seen[rec.CommitSHA] {
			a.seen[rec.CommitSHA] = true
			a.rows = append(a.rows, rec)
		}
		a.mu.Unlock()
		json.NewEncoder(w).Encode(wire.CheckpointRecordResponse{ID: rec.CommitSHA[:8], Created: true})
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *api) shas() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, r := range a.rows {
		out = append(out, r.CommitSHA)
	}
	return out
}

// env is one project's pod environment: workspace, store, API.
type env struct {
	t       *testing.T
	ws      string
	hooks   string
	vars    []string
	store   objstore.Store
	api     *api
	logFile string
	// sys, when set, starts the process with these attributes (new
	// namespaces: TestPID1InContainerServes).
	sys *syscall.SysProcAttr
}

func newEnv(t *testing.T, storage string) *env {
	e := &env{t: t, ws: t.TempDir(), hooks: t.TempDir(), api: newAPI(t)}
	data := t.TempDir()
	e.vars = []string{"SVC_PROJECT_ID=p1", "SVC_RUNTIME_TOKEN=" + token, "SVC_API_URL=" + e.api.srv.URL,
		"SVC_WORKSPACE_DIR=" + e.ws, "SVC_DATA_DIR=" + data, "SVC_PERSIST_RETRY_MIN=1h", "SVC_PERSIST_RETRY_MAX=1h",
		"SVC_TEST_HOOK_DIR=" + e.hooks, "PATH=" + os.Getenv("PATH")}
	switch storage {
	case "fs":
		e.vars = append(e.vars, "SVC_STORAGE=fs")
		s, err := fsstore.New(filepath.Join(data, "store"), fsstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		e.store = s
	default:
		s3 := testenv.MinIO(t)
		e.useS3(s3, s3.Endpoint)
	}
	e.logFile = filepath.Join(t.TempDir(), "podagent.log")
	return e
}

// newEnvBehindFaultProxy is an env whose pod reaches MinIO through a fault
// proxy the test can take down or black-hole.
func newEnvBehindFaultProxy(t *testing.T) (*env, *testenv.FaultProxy) {
	e := newEnv(t, "fs")
	s3 := testenv.MinIO(t)
	proxy := testenv.NewFaultProxy(t, s3.Endpoint)
	e.useS3(s3, proxy.Addr())
	return e, proxy
}

// startPersistedBehindFaultProxy starts a pod behind a fault proxy and
// persists a first flush (a.txt) while storage is up.
func startPersistedBehindFaultProxy(t *testing.T) (*env, *testenv.FaultProxy, *proc) {
	t.Helper()
	e, proxy := newEnvBehindFaultProxy(t)
	p := e.start()
	e.write("a.txt", "a\n")
	if code, body := p.flush(t, `{}`); code != 200 {
		t.Fatalf("flush with storage up: %d %s", code, body)
	}
	return e, proxy, p
}

func (e *env) useS3(s3 testenv.S3Env, endpoint string) {
	e.vars = append(e.vars, "SVC_STORAGE=s3", "SVC_S3_ENDPOINT="+endpoint, "SVC_S3_BUCKET="+s3.Bucket,
		"SVC_S3_ACCESS_KEY="+s3.AccessKey, "SVC_S3_SECRET_KEY="+s3.SecretKey)
	st, err := s3store.New(context.Background(), s3store.Config{Endpoint: s3.Endpoint, Bucket: s3.Bucket, AccessKey: s3.AccessKey, SecretKey: s3.SecretKey})
	if err != nil {
		e.t.Fatal(err)
	}
	e.store = st
}

type proc struct {
	cmd    *exec.Cmd
	addr   string
	exited chan struct{}
	err    error
}

// start runs `podagent serve` and returns once /readyz answers 200.
func (e *env) start(extra ...string) *proc {
	e.t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		e.t.Fatal(err)
	}
	p := &proc{addr: fmt.Sprintf("127.0.0.1:%d", port), exited: make(chan struct{})}
	p.cmd = exec.Command(podagentBin, "serve")
	p.cmd.Env = append(append(append([]string{}, e.vars...), "SVC_HTTP_ADDR="+p.addr), extra...)
	p.cmd.SysProcAttr = e.sys
	logf, err := os.OpenFile(e.logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		e.t.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); logf.Close(); close(p.exited) }()
	e.t.Cleanup(func() { p.cmd.Process.Kill(); <-p.exited })
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + p.addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
		}
		select {
		case <-p.exited:
			e.t.Fatalf("podagent exited before ready: %v\n%s", p.err, e.logs())
		case <-time.After(50 * time.Millisecond): // readiness poll with a deadline
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("podagent not ready\n%s", e.logs())
		}
	}
}

func (e *env) logs() string {
	b, _ := os.ReadFile(e.logFile)
	return string(b)
}

func (p *proc) flush(t *testing.T, body string) (int, string) {
	req, _ := http.NewRequest(http.MethodPost, "http://"+p.addr+"/agent/git-flush", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (p *proc) wait(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("podagent did not exit")
	}
}

// waitHook blocks until the pod reaches point (the FIFO is opened by it).
func (e *env) mkHook(point string, withContinue bool) {
	e.t.Helper()
	if err := syscall.Mkfifo(filepath.Join(e.hooks, point), 0o644); err != nil {
		e.t.Fatal(err)
	}
	if withContinue {
		if err := syscall.Mkfifo(filepath.Join(e.hooks, point+".go"), 0o644); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *env) waitHook(point string, p *proc) {
	e.t.Helper()
	got := make(chan struct{})
	go func() { os.ReadFile(filepath.Join(e.hooks, point)); close(got) }()
	select {
	case <-got:
	case <-p.exited:
		e.t.Fatalf("podagent exited before %s: %v\n%s", point, p.err, e.logs())
	case <-time.After(60 * time.Second):
		e.t.Fatalf("podagent never reached %s\n%s", point, e.logs())
	}
}

func (e *env) release(point string) {
	os.WriteFile(filepath.Join(e.hooks, point+".go"), []byte("go"), 0o644)
}

func (e *env) write(name, body string) {
	e.t.Helper()
	testfile.Write(e.t, filepath.Join(e.ws, name), body)
}

// requireCommitted fails the test unless the work tree's HEAD holds name
// with body.
func (e *env) requireCommitted(name, body string) {
	e.t.Helper()
	out, err := exec.Command("git", "-C", e.ws, "show", "HEAD:"+name).Output()
	if err != nil || string(out) != body {
		e.t.Fatalf("%s was not committed locally: %q %v", name, out, err)
	}
}

// durableGitDir extracts the durable object (the project's .git) into a temp
// dir and returns it.
func (e *env) durableGitDir() string {
	e.t.Helper()
	ctx := context.Background()
	// The manifest first, as every reader: the base it names is only ever
	// replaced by a superset, so base + listed increments hold its refs.
	// The durable state is the base plus what the manifest lists, with the
	// manifest's refs; an increment it does not list is never read.
	man, _, err := repoarchive.GetManifest(ctx, e.store, "p1")
	if err != nil && !errors.Is(err, objstore.ErrNotExist) {
		e.t.Fatal(err)
	}
	rc, _, err := e.store.Get(ctx, objstore.RepoKey("p1"))
	if err != nil {
		e.t.Fatal(err)
	}
	defer rc.Close()
	dir := e.t.TempDir()
	if _, err := archive.ExtractTarGz(rc, dir, archive.ExtractOptions{}); err != nil {
		e.t.Fatalf("durable object is not a complete archive: %v", err)
	}
	if man == nil {
		return dir
	}
	if _, err := repoarchive.FetchIncrements(ctx, e.store, man, dir, nil); err != nil {
		e.t.Fatalf("durable increments: %v", err)
	}
	if err := repoarchive.ApplyRefs(dir, man); err != nil {
		e.t.Fatal(err)
	}
	return dir
}

// durableHead extracts the durable object into a temp dir and returns the
// sha of main and the whole rev-list (fsck must pass).
func (e *env) durableHead() (string, string) {
	e.t.Helper()
	dir := e.durableGitDir()
	gitc := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"--git-dir", dir}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null")
		out, err := cmd.CombinedOutput()
		if err != nil {
			e.t.Fatalf("git %v: %v %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	gitc("fsck", "--connectivity-only")
	return gitc("rev-parse", "refs/heads/main"), gitc("rev-list", "refs/heads/main")
}

func (p *proc) flushSHA(t *testing.T) string {
	t.Helper()
	code, body := p.flush(t, "")
	if code != 200 {
		t.Fatalf("git-flush: %d %s", code, body)
	}
	var r wire.GitFlushResponse
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatal(err)
	}
	return r.SHA
}

func sigterm(t *testing.T, p *proc) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait(t)
	if p.err != nil {
		t.Fatalf("podagent exit: %v", p.err)
	}
}

// kill -9 between commit and persist, and during persist: on restart
// nothing recorded is lost, the object is never half-written, and the next
// turn persists everything.
func TestAgentRoutesRequireRuntimeToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "fs")
	p := e.start()
	for _, h := range []string{"", "Bearer wrong", "Basic " + token, token} {
		req, _ := http.NewRequest(http.MethodPost, "http://"+p.addr+"/agent/git-flush", nil)
		if h != "" {
			req.Header.Set("Authorization", h)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body wire.ErrorBody
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != 401 || body.Error.Code != "invalid_runtime_token" {
			t.Fatalf("%q: %d %+v", h, resp.StatusCode, body)
		}
	}
	for _, bad := range []string{`{"tag":"publish/x/1"}`, `{"tagMessage":"m"}`, `{"tag":"publish/-x/1","tagMessage":"m"}`, `{"tag":"v1","tagMessage":"m"}`, `{`} {
		if code, body := p.flush(t, bad); code != 400 {
			t.Fatalf("%s: %d %s", bad, code, body)
		}
	}
	// Publish: annotated tag on the flushed commit, re-persisted.
	e.write("site.html", "<h1>hi</h1>")
	code, body := p.flush(t, `{"tag":"publish/my-site/1700000000","tagMessage":"publish my-site"}`)
	var r wire.GitFlushResponse
	json.Unmarshal([]byte(body), &r)
	if code != 200 || r.Tag != "publish/my-site/1700000000" || len(r.SHA) != 40 {
		t.Fatalf("publish: %d %s", code, body)
	}
	dir := e.durableGitDir()
	out, err := exec.Command("git", "--git-dir", dir, "cat-file", "-t", "refs/tags/publish/my-site/1700000000").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "tag" {
		t.Fatalf("durable object lacks the annotated tag: %s %v", out, err)
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := http.Get("http://" + p.addr + path)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v", path, resp, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if path == "/metrics" {
			for _, m := range []string{"svc_podagent_persist_duration_seconds", "svc_podagent_persist_failures_total", "svc_podagent_cloud_sync_degraded", "svc_podagent_checkpoint_records_pending"} {
				if !bytes.Contains(b, []byte(m)) {
					t.Fatalf("/metrics lacks %s", m)
				}
			}
		}
	}
}

// SIGTERM in the healthy case: final flush, HEAD snapshot as project-src.
func TestSIGTERMHealthy(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "fs")
	e.write(".gitignore", ".env\n")
	e.write("index.js", "v0")
	p := e.start()
	e.write("index.js", "v1")
	e.write(".env", "secret")
	sigterm(t, p)
	src := archivetest.StoredEntries(t, e.store, objstore.SourceKey("p1"))
	if src["index.js"] != "v1" || src[".env"] != "" {
		t.Fatalf("project-src.tar.gz = %v", src)
	}
	if shas := e.api.shas(); len(shas) != 1 {
		t.Fatalf("final flush not recorded: %v", shas)
	}
	logs := e.logs()
	if !strings.Contains(logs, "HEAD snapshot uploaded") || strings.Contains(logs, "cloud-sync degraded") {
		t.Fatalf("logs:\n%s", logs)
	}
}

// SIGTERM in the degraded case: the final git flush fails, then the S3
// flush with forceProjectArchive tars the live work tree.
func TestSIGTERMDegraded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "minio")
	s3 := testenv.MinIO(t)
	proxy := testenv.NewFaultProxy(t, s3.Endpoint)
	e.vars = e.vars[:len(e.vars)-5] // replace the direct S3 settings by the proxy
	e.useS3(s3, proxy.Addr())
	e.write(".gitignore", ".env\n")
	e.write("index.js", "v0")
	p := e.start("SVC_TEST_PAUSE_AT=before-s3-flush")
	proxy.SetDown(true)
	for i := 1; i <= 3; i++ {
		e.write("index.js", fmt.Sprint("v", i))
		if code, body := p.flush(t, ""); code != 503 {
			t.Fatalf("flush %d with storage down: %d %s", i, code, body)
		}
	}
	if !strings.Contains(e.logs(), "cloud-sync degraded (mode=git_only)") {
		t.Fatalf("no degraded log line:\n%s", e.logs())
	}
	e.write(".env", "live-only")
	e.mkHook("before-s3-flush", true)
	p.cmd.Process.Signal(syscall.SIGTERM)
	e.waitHook("before-s3-flush", p) // the final git flush has failed by now
	proxy.SetDown(false)
	e.release("before-s3-flush")
	p.wait(t)
	if p.err != nil {
		t.Fatal(p.err)
	}
	logs := e.logs()
	if !strings.Contains(logs, "final git flush failed") || !strings.Contains(logs, "S3 flush done") {
		t.Fatalf("logs:\n%s", logs)
	}
	src := archivetest.StoredEntries(t, e.store, objstore.SourceKey("p1"))
	if src[".env"] != "live-only" || src["index.js"] != "v3" {
		t.Fatalf("project-src.tar.gz is not the live tree: %v", src)
	}
}

// SVC_PPROF_ADDR serves the Go profiler on its own listener, not on the
// pod's API listener.
func TestPprofListener(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "fs")
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p := e.start("SVC_PPROF_ADDR=" + addr)
	resp, err := http.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Contains(b, []byte("goroutine profile:")) {
		t.Fatalf("pprof: %d %.200s", resp.StatusCode, b)
	}
	resp, err = http.Get("http://" + p.addr + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == 200 {
		t.Fatal("the pod's API listener serves pprof")
	}
}
