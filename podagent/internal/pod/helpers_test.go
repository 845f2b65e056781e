package pod

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/svc-dev/svc/podagent/internal/config"
	"github.com/svc-dev/svc/shared/objstore"
	fsstore "github.com/svc-dev/svc/shared/objstore/fs"
	s3store "github.com/svc-dev/svc/shared/objstore/s3"
	"github.com/svc-dev/svc/shared/syncmode"
	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/testenv/testfile"
	"github.com/svc-dev/svc/shared/wire"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const testToken = "svc_rt_p1.test-token"

// fakeAPI is the API's record endpoint as the pod sees it: bearer check,
// idempotent on (project, sha). (The real handler and store are tested in
// apiserver.)
type fakeAPI struct {
	srv     *httptest.Server
	project string
	down    atomic.Bool

	mu    sync.Mutex
	rows  map[string]wire.CheckpointRecord
	order []string
	posts int
}

func newFakeAPI(t *testing.T, project string) *fakeAPI {
	a := &fakeAPI{project: project, rows: map[string]wire.CheckpointRecord{}}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/internal/projects/"+project+"/checkpoints/record" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+testToken {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if a.down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var rec wire.CheckpointRecord
		if err := json.NewDecoder(r.Body).Decode(&rec); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		a.mu.Lock()
		a.posts++
		_, exists := a.rows[rec.CommitSHA]
		if !exists {
			a.rows[rec.CommitSHA] = rec
			a.order = append(a.order, rec.CommitSHA)
		}
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(wire.CheckpointRecordResponse{ID: "row-" + rec.CommitSHA[:8], Created: !exists})
	}))
	t.Cleanup(a.srv.Close)
	return a
}

// newProject is project p1's fake API and a fresh work tree.
func newProject(t *testing.T) (*fakeAPI, string) {
	return newFakeAPI(t, "p1"), t.TempDir()
}

// options starts a pod of the fake API's project on ws and store.
func (a *fakeAPI) options(ws string, store objstore.Store) Options {
	return Options{Config: testConfig(a.project, ws, a.srv.URL), Store: store}
}

func (a *fakeAPI) recorded() []wire.CheckpointRecord {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]wire.CheckpointRecord, 0, len(a.order))
	for _, sha := range a.order {
		out = append(out, a.rows[sha])
	}
	return out
}

func testConfig(project, ws, apiURL string) *config.Config {
	return &config.Config{
		ProjectID: project, Mode: syncmode.GitOnly, APIURL: apiURL, RuntimeToken: testToken,
		Store: objstore.Config{Backend: "fs"}, WorkspaceDir: ws, LargeFileBytes: config.DefaultLargeFileBytes,
		DegradeAfterFailures: 3, HTTPAddr: "127.0.0.1:0",
		// Background retries are kept out of the way: tests drive every
		// durability step themselves.
		PersistRetryMin: time.Hour, PersistRetryMax: time.Hour,
	}
}

// observed returns a logger that writes to the test log and to an observer.
func observed(t *testing.T) (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.DebugLevel)
	return zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), core)), logs
}

func messages(logs *observer.ObservedLogs, contains string) []string {
	var out []string
	for _, e := range logs.All() {
		if strings.Contains(e.Message, contains) {
			out = append(out, e.Message)
		}
	}
	return out
}

type storeKind struct {
	name string
	open func(t *testing.T) objstore.Store
}

// eachStore runs body as a subtest on each kind of store.
func eachStore(t *testing.T, body func(t *testing.T, store objstore.Store)) {
	for _, sk := range storeKinds() {
		t.Run(sk.name, func(t *testing.T) { body(t, sk.open(t)) })
	}
}

func storeKinds() []storeKind {
	return []storeKind{
		{"fs", func(t *testing.T) objstore.Store {
			s, err := fsstore.New(t.TempDir(), fsstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		{"minio", func(t *testing.T) objstore.Store {
			env := testenv.MinIO(t)
			return openS3(t, env.Endpoint, env)
		}},
	}
}

func openS3(t *testing.T, endpoint string, env testenv.S3Env) objstore.Store {
	t.Helper()
	s, err := openS3Store(endpoint, env)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func openS3Store(endpoint string, env testenv.S3Env) (objstore.Store, error) {
	return s3store.New(context.Background(), s3store.Config{Endpoint: endpoint, Bucket: env.Bucket, AccessKey: env.AccessKey, SecretKey: env.SecretKey})
}

func startPod(t *testing.T, o Options) *Pod {
	t.Helper()
	if o.Log == nil {
		o.Log = zaptest.NewLogger(t)
	}
	p, err := Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func writeFile(t *testing.T, dir, name, body string) {
	t.Helper()
	testfile.Write(t, filepath.Join(dir, name), body)
}

// gitIn runs a test-side git command (plain exec: the test is the trusted
// caller here, the pod's own calls all go through gitrun).
func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func sortedKeys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
