package lfs_test

// These tests run the whole large-file path for real: the pod (in-process,
// real git and git-lfs), a real apiserver process serving the batch
// endpoint (SQLite for its projects), and a real MinIO behind a counting
// proxy, so the presigned uploads git-lfs makes can be counted.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/archive/archivetest"

	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/podagent/internal/config"
	"github.com/svc-dev/svc/podagent/internal/lfs"
	"github.com/svc-dev/svc/podagent/internal/pod"
	"github.com/svc-dev/svc/shared/objstore"
	s3store "github.com/svc-dev/svc/shared/objstore/s3"
	"github.com/svc-dev/svc/shared/runtimetoken"
	"github.com/svc-dev/svc/shared/syncmode"
	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/testenv/testfile"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const secret = "lfs-test-runtime-secret"

var (
	apiBinOnce sync.Once
	apiBin     string
	apiBinErr  error
)

// apiserverBinary is $SVC_BIN_DIR/apiserver (make test) or a fresh build.
func apiserverBinary(t *testing.T) string {
	t.Helper()
	apiBinOnce.Do(func() {
		if dir := os.Getenv("SVC_BIN_DIR"); dir != "" {
			if _, err := os.Stat(filepath.Join(dir, "apiserver")); err == nil {
				apiBin = filepath.Join(dir, "apiserver")
				return
			}
		}
		_, file, _, _ := runtime.Caller(0)
		out := filepath.Join(os.TempDir(), fmt.Sprintf("svc-lfs-test-apiserver-%d", os.Getpid()))
		cmd := exec.Command("go", "build", "-o", out, "./cmd/apiserver")
		cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..", "..", "apiserver")
		cmd.Env = append(os.Environ(), "GOWORK=off")
		if b, err := cmd.CombinedOutput(); err != nil {
			apiBinErr = fmt.Errorf("building apiserver: %v\n%s", err, b)
			return
		}
		apiBin = out
	})
	if apiBinErr != nil {
		t.Fatal(apiBinErr)
	}
	return apiBin
}

// world is one apiserver process over SQLite and a MinIO bucket reached
// through a proxy that counts large-file uploads.
type world struct {
	t       *testing.T
	apiURL  string
	dataDir string
	store   objstore.Store // direct MinIO client (the pod's store)
	uploads atomic.Int64   // presigned PUTs of <project>/lfs/objects/*
}

func newWorld(t *testing.T) *world {
	t.Helper()
	env := testenv.MinIO(t)
	w := &world{t: t, dataDir: t.TempDir()}
	target, _ := url.Parse("http://" + env.Endpoint)
	rp := httputil.NewSingleHostReverseProxy(target) // keeps the Host the URL was signed for
	proxy := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/lfs/objects/") {
			w.uploads.Add(1)
		}
		rp.ServeHTTP(rw, r)
	}))
	t.Cleanup(proxy.Close)
	st, err := s3store.New(context.Background(), s3store.Config{Endpoint: env.Endpoint, Bucket: env.Bucket, AccessKey: env.AccessKey, SecretKey: env.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	w.store = st

	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(apiserverBinary(t), "serve")
	cmd.Env = append(w.env(), "SVC_HTTP_ADDR="+addr, "SVC_STORAGE=s3",
		"SVC_S3_ENDPOINT="+strings.TrimPrefix(proxy.URL, "http://"), "SVC_S3_BUCKET="+env.Bucket,
		"SVC_S3_ACCESS_KEY="+env.AccessKey, "SVC_S3_SECRET_KEY="+env.SecretKey)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		<-exited
		if t.Failed() {
			t.Logf("apiserver logs:\n%s", logs.String())
		}
	})
	w.apiURL = "http://" + addr
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(w.apiURL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return w
			}
		}
		select {
		case <-exited:
			t.Fatalf("apiserver exited:\n%s", logs.String())
		case <-time.After(20 * time.Millisecond): // readiness poll with a deadline
		}
		if time.Now().After(deadline) {
			t.Fatalf("apiserver not ready: %v\n%s", err, logs.String())
		}
	}
}

func (w *world) env() []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + w.dataDir, "SVC_DATA_DIR=" + w.dataDir,
		"SVC_RUNTIME_AUTH_SECRET=" + secret, "SVC_LOG_LEVEL=warn"}
}

// project creates a project with the admin CLI and returns its id and token.
func (w *world) project(name string) (string, string) {
	w.t.Helper()
	admin := func(args ...string) map[string]any {
		cmd := exec.Command(apiserverBinary(w.t), append([]string{"admin"}, args...)...)
		cmd.Env = w.env()
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			w.t.Fatalf("admin %v: %v\n%s", args, err, errb.String())
		}
		var m map[string]any
		if err := json.Unmarshal(out.Bytes(), &m); err != nil {
			w.t.Fatalf("admin %v: %v: %s", args, err, out.String())
		}
		return m
	}
	ws := admin("workspace", "create", "--name", name)["id"].(string)
	id := admin("project", "create", "--workspace", ws, "--name", name)["id"].(string)
	return id, runtimetoken.Mint([]byte(secret), id)
}

func podConfig(project, token, apiURL, ws string) *config.Config {
	return &config.Config{ProjectID: project, Mode: syncmode.GitOnly, APIURL: apiURL, RuntimeToken: token,
		Store: objstore.Config{Backend: "s3"}, WorkspaceDir: ws, LargeFileBytes: config.DefaultLargeFileBytes, DegradeAfterFailures: 3,
		HTTPAddr: "127.0.0.1:0", PersistRetryMin: time.Hour, PersistRetryMax: time.Hour, LFS: true}
}

func startPod(t *testing.T, store objstore.Store, cfg *config.Config) *pod.Pod {
	t.Helper()
	p, err := pod.Start(context.Background(), pod.Options{Config: cfg, Store: store, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func write(t *testing.T, dir, name string, b []byte) {
	t.Helper()
	testfile.Write(t, filepath.Join(dir, filepath.FromSlash(name)), string(b))
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1", "GIT_LFS_SKIP_SMUDGE=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %v: %v", args, err)
	}
	return string(out)
}

func sha256hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// assertPointer checks that HEAD holds a pointer to content at path.
func assertPointer(t *testing.T, ws, path string, content []byte) string {
	t.Helper()
	blob := git(t, ws, "cat-file", "-p", "HEAD:"+path)
	oid := sha256hex(content)
	want := fmt.Sprintf("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", oid, len(content))
	if blob != want {
		t.Fatalf("HEAD:%s is not the pointer of its content:\n%q\nwant\n%q", path, blob, want)
	}
	return oid
}

// assertStored checks <projectId>/lfs/objects/<oid> holds content.
func assertStored(t *testing.T, s objstore.Store, project string, content []byte) {
	t.Helper()
	oid := sha256hex(content)
	rc, info, err := s.Get(context.Background(), objstore.LFSKey(project, oid))
	if err != nil {
		t.Fatalf("object %s: %v", objstore.LFSKey(project, oid), err)
	}
	defer rc.Close()
	got, _ := io.ReadAll(rc)
	if info.Size != int64(len(content)) || sha256hex(got) != oid {
		t.Fatalf("object %s: %d bytes with sha256 %s, want %d bytes", oid, len(got), sha256hex(got), len(content))
	}
}

// assertConfigClean checks that nothing in the repository config names the
// endpoint or the token (spec 5.3).
func assertConfigClean(t *testing.T, name string, cfg []byte, token, apiURL string) {
	t.Helper()
	low := strings.ToLower(string(cfg))
	for _, bad := range []string{strings.ToLower(token), strings.ToLower(apiURL), "extraheader", "authorization", "bearer", "lfs.url", "[remote", "url ="} {
		if strings.Contains(low, bad) {
			t.Fatalf("%s contains %q:\n%s", name, bad, cfg)
		}
	}
	if !strings.Contains(low, "[filter \"lfs\"]") {
		t.Fatalf("%s has no lfs filter:\n%s", name, cfg)
	}
}

func lfsEntries(entries map[string]string) []string {
	var out []string
	for name := range entries {
		if name == "lfs" || strings.HasPrefix(name, "lfs/") {
			out = append(out, name)
		}
	}
	return out
}

func TestLargeFilesPushDedupAndColdStart(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	project, token := w.project("lfs-a")
	ctx := context.Background()

	ws := t.TempDir()
	p := startPod(t, w.store, podConfig(project, token, w.apiURL, ws))
	if !p.ColdStart.Seeded {
		t.Fatalf("cold start = %+v", p.ColdStart)
	}
	attrs, _ := os.ReadFile(filepath.Join(ws, ".gitattributes"))
	if !strings.Contains(string(attrs), lfs.AttributesBegin) || !strings.Contains(string(attrs), "*.[pP][nN][gG] filter=lfs") {
		t.Fatalf("curated .gitattributes missing:\n%s", attrs)
	}

	big := randomBytes(t, 6<<20) // above LARGE_FILE_BYTES, no curated extension
	logo := randomBytes(t, 2048) // small, but *.png is curated
	write(t, ws, "data/weights.bin", big)
	write(t, ws, "img/logo.png", logo)
	write(t, ws, "src/main.go", []byte("package main\n"))
	if _, err := p.Turn(ctx, "add weights"); err != nil {
		t.Fatal(err)
	}
	assertPointer(t, ws, "data/weights.bin", big)
	assertPointer(t, ws, "img/logo.png", logo)
	if blob := git(t, ws, "cat-file", "-p", "HEAD:src/main.go"); blob != "package main\n" {
		t.Fatalf("small source file changed: %q", blob)
	}
	assertStored(t, w.store, project, big)
	assertStored(t, w.store, project, logo)
	if n := w.uploads.Load(); n != 2 {
		t.Fatalf("uploads = %d, want 2", n)
	}
	if got, _ := os.ReadFile(filepath.Join(ws, "data/weights.bin")); !bytes.Equal(got, big) {
		t.Fatal("the work tree lost the real bytes")
	}
	if e := lfsEntries(archivetest.StoredEntries(t, w.store, objstore.RepoKey(project))); len(e) != 0 {
		t.Fatalf("push succeeded but the .git archive holds the large-file cache: %v", e)
	}

	// The same bytes under another name: same oid, nothing uploaded.
	write(t, ws, "data/copy.bin", big)
	if _, err := p.Turn(ctx, "copy weights"); err != nil {
		t.Fatal(err)
	}
	assertPointer(t, ws, "data/copy.bin", big)
	if n := w.uploads.Load(); n != 2 {
		t.Fatalf("uploads after an identical file = %d, want 2", n)
	}

	// Restart on the same disk with the pod's pushed list gone: the batch
	// endpoint answers without actions for stored objects (server-side dedup).
	p.Close()
	if err := os.Remove(filepath.Join(ws, ".git", lfs.StateDir, "lfs-pushed")); err != nil {
		t.Fatal(err)
	}
	p = startPod(t, w.store, podConfig(project, token, w.apiURL, ws))
	if !p.ColdStart.Local {
		t.Fatalf("cold start = %+v", p.ColdStart)
	}
	write(t, ws, "src/main.go", []byte("package main\n\nfunc main() {}\n"))
	if _, err := p.Turn(ctx, "edit"); err != nil {
		t.Fatal(err)
	}
	if n := w.uploads.Load(); n != 2 {
		t.Fatalf("uploads after a re-push of stored objects = %d, want 2", n)
	}

	// Neither the endpoint nor the token is in the repository config, on
	// disk or in the durable archive.
	cfgBytes, err := os.ReadFile(filepath.Join(ws, ".git", "config"))
	if err != nil {
		t.Fatal(err)
	}
	assertConfigClean(t, ".git/config", cfgBytes, token, w.apiURL)
	entries := archivetest.StoredEntries(t, w.store, objstore.RepoKey(project))
	assertConfigClean(t, "config in repo.git.tar.gz", []byte(entries["config"]), token, w.apiURL)
	for name, body := range entries {
		if strings.Contains(body, token) {
			t.Fatalf("archive entry %s contains the runtime token", name)
		}
	}

	// Cold start of a fresh pod in a new directory: .git restored, the
	// large files pulled back as real bytes.
	ws2 := t.TempDir()
	p2 := startPod(t, w.store, podConfig(project, token, w.apiURL, ws2))
	if !p2.ColdStart.Restored {
		t.Fatalf("cold start = %+v", p2.ColdStart)
	}
	for name, want := range map[string][]byte{"data/weights.bin": big, "data/copy.bin": big, "img/logo.png": logo} {
		got, err := os.ReadFile(filepath.Join(ws2, filepath.FromSlash(name)))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s after cold start: %d bytes (err %v), want the %d real bytes", name, len(got), err, len(want))
		}
	}
	if st := git(t, ws2, "status", "--porcelain"); st != "" {
		t.Fatalf("work tree after cold start is not clean:\n%s", st)
	}
	cfg2, _ := os.ReadFile(filepath.Join(ws2, ".git", "config"))
	assertConfigClean(t, "restored .git/config", cfg2, token, w.apiURL)
	if _, err := p2.Turn(ctx, "nothing changed"); err != nil {
		t.Fatal(err)
	}
	if head := strings.TrimSpace(git(t, ws2, "rev-parse", "HEAD")); head != p2.ColdStart.Head {
		t.Fatalf("a turn without changes after cold start committed %s", head)
	}
}

func TestPushFailureKeepsCacheInArchive(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	project, token := w.project("lfs-b")
	ctx := context.Background()

	// The pod reaches the API through a proxy whose large-file routes can
	// be taken down (checkpoint records still pass).
	target, _ := url.Parse(w.apiURL)
	rp := httputil.NewSingleHostReverseProxy(target)
	var down atomic.Bool
	front := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if down.Load() && strings.Contains(r.URL.Path, "/lfs/") {
			http.Error(rw, `{"message":"down"}`, http.StatusInternalServerError)
			return
		}
		rp.ServeHTTP(rw, r)
	}))
	t.Cleanup(front.Close)

	ws := t.TempDir()
	p := startPod(t, w.store, podConfig(project, token, front.URL, ws))
	big := randomBytes(t, 6<<20)
	oid := sha256hex(big)
	down.Store(true)
	write(t, ws, "media/clip.bin", big)
	if _, err := p.Turn(ctx, "add clip"); err != nil {
		t.Fatal(err)
	}
	assertPointer(t, ws, "media/clip.bin", big)
	if _, err := w.store.Head(ctx, objstore.LFSKey(project, oid)); err == nil {
		t.Fatal("object stored although the batch endpoint was down")
	}
	cached := "lfs/objects/" + oid[:2] + "/" + oid[2:4] + "/" + oid
	entries := archivetest.StoredEntries(t, w.store, objstore.RepoKey(project))
	if body, ok := entries[cached]; !ok || len(body) == 0 {
		t.Fatalf("push failed but the .git archive lacks %s (lfs entries: %v)", cached, lfsEntries(entries))
	}
	for name, body := range entries {
		if strings.HasPrefix(name, "lfs/logs") || strings.HasPrefix(name, "lfs/tmp") {
			t.Fatalf("archive holds git-lfs scratch entry %s", name)
		}
		if strings.Contains(body, token) {
			t.Fatalf("archive entry %s contains the runtime token", name)
		}
	}

	// A fresh pod restores from that archive: the bytes come from the
	// archived cache even though the endpoint never got them.
	ws2 := t.TempDir()
	p2 := startPod(t, w.store, podConfig(project, token, front.URL, ws2))
	if got, _ := os.ReadFile(filepath.Join(ws2, "media/clip.bin")); !bytes.Equal(got, big) {
		t.Fatalf("clip after cold start: %d bytes, want the %d real bytes", len(got), len(big))
	}

	// The endpoint is back: the next turn pushes the object, and the
	// archive leaves the cache out again.
	down.Store(false)
	write(t, ws2, "README.md", []byte("clip\n"))
	if _, err := p2.Turn(ctx, "readme"); err != nil {
		t.Fatal(err)
	}
	assertStored(t, w.store, project, big)
	if e := lfsEntries(archivetest.StoredEntries(t, w.store, objstore.RepoKey(project))); len(e) != 0 {
		t.Fatalf("push succeeded but the .git archive holds the large-file cache: %v", e)
	}
	_ = p
}
