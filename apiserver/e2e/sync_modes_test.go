package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/objstore"
	s3store "github.com/svc-dev/svc/shared/objstore/s3"
	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/wire"
)

// The three sync modes end to end, with the real apiserver and
// podagent binaries on Postgres + MinIO, real git and git-lfs
// (docs/sync-modes.md).

const largeThreshold = 4096 // LARGE_FILE_BYTES of these tests

// modePod is a podagent process that can be stopped (SIGTERM: the spec
// 10.2 shutdown runs) and replaced by a new one.
type modePod struct {
	URL, token, workspace string
	cmd                   *exec.Cmd
	logs                  *logBuffer
	once                  sync.Once
}

type modeEnv struct {
	*env
	t       testing.TB
	s3      testenv.S3Env
	api     *api
	apiURL  string // what pods dial (a fault proxy in front of the API when set)
	project string
	token   string
	key     string
}

func (m *modeEnv) s3Vars() []string {
	return []string{"SVC_STORAGE=s3", "SVC_S3_ENDPOINT=" + m.s3.Endpoint, "SVC_S3_BUCKET=" + m.s3.Bucket,
		"SVC_S3_ACCESS_KEY=" + m.s3.AccessKey, "SVC_S3_SECRET_KEY=" + m.s3.SecretKey}
}

func newModeEnv(t testing.TB) *modeEnv {
	e := newEnv(t)
	m := &modeEnv{env: e, t: t, s3: testenv.MinIO(t)}
	m.api = e.startAPI(m.s3Vars()...)
	m.apiURL = m.api.URL
	acc := e.account("free")
	m.key = acc.key
	m.project = e.admin("project", "create", "--workspace", acc.workspace, "--name", "site")["id"].(string)
	m.token = e.admin("project", "runtime-token", "--id", m.project)["token"].(string)
	return m
}

// adminRun runs an admin command with the object store configured and
// returns its JSON answer and exit code (no failure on a non-zero exit).
func (m *modeEnv) adminRun(args ...string) (map[string]any, int) {
	m.t.Helper()
	cmd := exec.Command(apiserverBin, append([]string{"admin"}, args...)...)
	cmd.Env = append(m.baseEnv(), m.s3Vars()...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		m.t.Fatalf("admin %v: %v", args, err)
	}
	var res map[string]any
	if jerr := json.Unmarshal(out.Bytes(), &res); jerr != nil {
		m.t.Fatalf("admin %v: exit %d, not JSON: %s\n%s", args, code, out.String(), errb.String())
	}
	return res, code
}

// countObjects counts the project's objects under <projectId>/<prefix>.
func (m *modeEnv) countObjects(prefix string) int {
	m.t.Helper()
	objs, err := s3store.New(context.Background(), s3store.Config{Endpoint: m.s3.Endpoint, Bucket: m.s3.Bucket,
		AccessKey: m.s3.AccessKey, SecretKey: m.s3.SecretKey})
	must(m.t, err)
	n := 0
	must(m.t, objs.List(context.Background(), m.project+"/"+prefix, func(objstore.ObjectInfo) error { n++; return nil }))
	return n
}

func (m *modeEnv) setMode(mode string) {
	m.t.Helper()
	if _, code := m.adminRun("project", "set-sync-mode", "--id", m.project, "--mode", mode, "--force"); code != 0 {
		m.t.Fatalf("set-sync-mode %s: exit %d", mode, code)
	}
}

// startPod starts a pod of mode on workspace ("" = a fresh empty one) and
// waits until it is ready.
func (m *modeEnv) startPod(mode, workspace string, extra ...string) *modePod {
	m.t.Helper()
	p := m.launchPod(mode, workspace, extra...)
	waitReady(m.t, "podagent", p.URL+"/readyz", 60*time.Second, p.logs)
	return p
}

// launchPod starts a pod of mode on workspace without waiting for it.
func (m *modeEnv) launchPod(mode, workspace string, extra ...string) *modePod {
	m.t.Helper()
	bin, err := podagentBinary()
	must(m.t, err)
	port, err := testenv.FreePort()
	must(m.t, err)
	if workspace == "" {
		workspace = filepath.Join(m.t.TempDir(), "ws")
	}
	p := &modePod{URL: fmt.Sprintf("http://127.0.0.1:%d", port), token: m.token, workspace: workspace, logs: &logBuffer{}}
	p.cmd = exec.Command(bin, "serve")
	p.cmd.Env = append(append(append(os.Environ(), "SVC_PROJECT_ID="+m.project, "SVC_RUNTIME_TOKEN="+m.token,
		"SVC_API_URL="+m.apiURL, "SVC_CLOUD_SYNC_MODE="+mode, "SVC_WORKSPACE_DIR="+workspace,
		"SVC_DATA_DIR="+m.t.TempDir(), fmt.Sprintf("SVC_HTTP_ADDR=127.0.0.1:%d", port), "SVC_LOG_LEVEL=info",
		fmt.Sprintf("LARGE_FILE_BYTES=%d", largeThreshold)), m.s3Vars()...), extra...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	must(m.t, p.cmd.Start())
	m.t.Cleanup(func() {
		p.stop(m.t)
		if m.t.Failed() {
			m.t.Logf("podagent (%s) logs:\n%s", mode, p.logs.String())
		}
	})
	return p
}

// stop sends SIGTERM and waits for the shutdown sequence to end.
func (p *modePod) stop(t testing.TB) {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		_ = p.cmd.Wait()
	})
}

func (p *modePod) flush(t testing.TB) string {
	t.Helper()
	var out wire.GitFlushResponse
	postJSON(t, "git-flush", p.URL+"/agent/git-flush", p.token, `{}`, &out)
	return out.SHA
}

// turn writes files (nil content removes) and flushes: one turn.
func (p *modePod) turn(t testing.TB, files map[string][]byte) string {
	t.Helper()
	for name, b := range files {
		path := filepath.Join(p.workspace, filepath.FromSlash(name))
		if b == nil {
			must(t, os.Remove(path))
			continue
		}
		must(t, os.MkdirAll(filepath.Dir(path), 0o755))
		must(t, os.WriteFile(path, b, 0o644))
	}
	return p.flush(t)
}

func randomBytes(t testing.TB, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return b
}

// checkFiles asserts the workspace holds exactly want's bytes for its paths
// (nil: absent).
func checkFiles(t testing.TB, ws string, want map[string][]byte) {
	t.Helper()
	for name, b := range want {
		got, err := os.ReadFile(filepath.Join(ws, filepath.FromSlash(name)))
		switch {
		case b == nil && err == nil:
			t.Errorf("%s: present after cold start, want removed", name)
		case b != nil && err != nil:
			t.Errorf("%s: %v", name, err)
		case b != nil && !bytes.Equal(got, b):
			t.Errorf("%s: %d bytes after cold start (%q…), want %d", name, len(got), got[:min(len(got), 60)], len(b))
		}
	}
}

// parity runs admin parity-check on the project.
func (m *modeEnv) parity() (map[string]any, int) {
	m.t.Helper()
	return m.adminRun("parity-check", "--project", m.project)
}

func projectResult(t testing.TB, rep map[string]any) map[string]any {
	t.Helper()
	ps, _ := rep["projects"].([]any)
	if len(ps) != 1 {
		t.Fatalf("parity report %v", rep)
	}
	return ps[0].(map[string]any)
}

// readsGetJSON reads an API path with the member key.
func (m *modeEnv) read(path string) (*http.Response, map[string]any) {
	m.t.Helper()
	resp, body := do(m.t, http.MethodGet, m.api.URL+"/api/projects/"+m.project+path, m.key, nil, nil)
	var out map[string]any
	_ = json.Unmarshal(body, &out)
	return resp, out
}

func (m *modeEnv) fileList() (string, map[string]float64) {
	m.t.Helper()
	resp, out := m.read("/checkpoints/files")
	if resp.StatusCode != 200 {
		m.t.Fatalf("files: %d %v", resp.StatusCode, out)
	}
	files := map[string]float64{}
	list, _ := out["files"].([]any)
	for _, f := range list {
		fm := f.(map[string]any)
		files[fm["path"].(string)] = fm["size"].(float64)
	}
	if out["readSource"] != resp.Header.Get("X-Svc-Read-Source") {
		m.t.Fatalf("read source header %q, body %v", resp.Header.Get("X-Svc-Read-Source"), out["readSource"])
	}
	return out["readSource"].(string), files
}

// Per mode: N turns with large files (one removed again), then a cold start
// in an empty workspace restores everything (assets in s3/dual_shadow,
// git-lfs in git_only), and the rows are exactly the turns (none in s3).
func TestSyncModesColdStartRestoresEverything(t *testing.T) {
	for _, mode := range []string{"s3", "dual_shadow", "git_only"} {
		t.Run(mode, func(t *testing.T) {
			m := newModeEnv(t)
			m.setMode(mode)
			p := m.startPod(mode, "")
			want := map[string][]byte{}
			const turns = 3
			for i := 1; i <= turns; i++ {
				files := map[string][]byte{
					fmt.Sprintf("pages/page%d.html", i): []byte(fmt.Sprintf("<h1>%d</h1>\n", i)),
					fmt.Sprintf("media/clip%d.bin", i):  randomBytes(t, largeThreshold*2+i),
				}
				if i == 3 {
					files["media/clip1.bin"] = nil // a removed large file is pruned
				}
				for k, v := range files {
					want[k] = v
				}
				if sha := p.turn(t, files); len(sha) != 40 {
					t.Fatalf("turn %d: sha %q", i, sha)
				}
			}
			p.stop(t)

			q := m.startPod(mode, "")
			checkFiles(t, q.workspace, want)
			if mode != "git_only" {
				// Large files stayed out of git: offloaded as assets.
				out, err := exec.Command("git", "-C", q.workspace, "ls-files", "media").Output()
				must(t, err)
				if len(bytes.TrimSpace(out)) != 0 {
					t.Errorf("large files tracked in git in %s: %s", mode, out)
				}
			}
			_, files := m.fileList()
			if mode != "git_only" {
				if _, ok := files["media/clip1.bin"]; ok {
					t.Errorf("the removed asset is still listed: %v", files)
				}
				if files["media/clip2.bin"] != float64(len(want["media/clip2.bin"])) {
					t.Errorf("asset listing %v", files)
				}
			}
			rep, code := m.parity()
			res := projectResult(t, rep)
			switch mode {
			case "s3":
				if res["status"] != "skipped" || res["checkpoints"].(float64) != 0 || code != 0 {
					t.Fatalf("s3 parity %v (exit %d): s3 writes no rows", res, code)
				}
			default:
				if res["status"] != "ok" || code != 0 || res["turns"].(float64) != turns ||
					res["firstTurn"].(float64) != 1 || res["lastTurn"].(float64) != turns {
					t.Fatalf("%s parity %v (exit %d), want exactly %d turns with one row each", mode, res, code, turns)
				}
			}
			// The new pod goes on counting turns.
			q.turn(t, map[string][]byte{"pages/after.html": []byte("after\n")})
			if mode != "s3" {
				rep, code = m.parity()
				if res := projectResult(t, rep); res["lastTurn"].(float64) != turns+1 || code != 0 {
					t.Fatalf("after a cold start: %v (exit %d)", res, code)
				}
			}
		})
	}
}

// dual_shadow with the API origin down: pushes fail, the degrade machine
// logs "cloud-sync degraded (mode=dual_shadow)", turns still commit and
// reach S3; when the origin is back the background retry pushes and logs
// "cloud-sync recovered (mode=dual_shadow)", and no turn lacks its row.
func TestDualShadowDegradesAndRecoversWithTheOriginDown(t *testing.T) {
	m := newModeEnv(t)
	u, err := url.Parse(m.api.URL)
	must(t, err)
	proxy := testenv.NewFaultProxy(t, u.Host)
	m.apiURL = "http://" + proxy.Addr()
	m.setMode("dual_shadow")
	p := m.startPod("dual_shadow", "", "SVC_PERSIST_RETRY_MIN=50ms", "SVC_PERSIST_RETRY_MAX=200ms",
		"SVC_DEGRADE_AFTER_FAILURES=3")
	p.turn(t, map[string][]byte{"a.txt": []byte("1\n")})

	proxy.SetDown(true)
	for i := 2; i <= 3; i++ {
		must(t, os.WriteFile(filepath.Join(p.workspace, "a.txt"), []byte(fmt.Sprintf("%d\n", i)), 0o644))
		resp, body := do(t, http.MethodPost, p.URL+"/agent/git-flush", p.token, []byte(`{}`),
			http.Header{"Content-Type": {"application/json"}})
		if resp.StatusCode != 503 {
			t.Fatalf("flush with the origin down: %d %s", resp.StatusCode, body)
		}
	}
	waitLog(t, p.logs, "cloud-sync degraded (mode=dual_shadow)", 60*time.Second)
	// A transient failure is not "another pod owns the project": the pod
	// stays ready and is not fenced (docs/sync-modes.md §11).
	if st := p.ready(); st != 200 || strings.Contains(p.logs.String(), "FENCED") {
		t.Fatalf("degraded pod: /readyz %d, or fenced:\n%s", st, p.logs.String())
	}
	// S3 stays authoritative and current while degraded.
	if src, files := m.fileList(); src != "s3" || files["a.txt"] != 2 {
		t.Fatalf("reads while degraded: %s %v", src, files)
	}
	proxy.SetDown(false)
	waitLog(t, p.logs, "cloud-sync recovered (mode=dual_shadow)", 60*time.Second)
	rep, code := m.parity()
	if res := projectResult(t, rep); res["status"] != "ok" || res["lastTurn"].(float64) != 3 || code != 0 {
		t.Fatalf("parity after recovery: %v (exit %d)", res, code)
	}
}

func waitLog(t testing.TB, logs *logBuffer, line string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(logs.String(), line) {
		if time.Now().After(deadline) {
			t.Fatalf("no log line %q within %s:\n%s", line, timeout, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Every transition of spec 3.1's table, across pod restarts (each new pod
// starts in an empty workspace, as on a new assignment): no turn is lost,
// reads come from the mode's source (git_only → dual_shadow moves them to
// S3 at once, before the pod restarts), and the rows stay one per turn.
func TestSyncModeTransitions(t *testing.T) {
	m := newModeEnv(t)
	big := randomBytes(t, largeThreshold*3)
	want := map[string][]byte{}
	stages := []string{"s3", "dual_shadow", "git_only", "dual_shadow", "s3", "git_only"}
	m.setMode(stages[0])
	var p *modePod
	for i, mode := range stages {
		if p != nil {
			p.stop(t)
		}
		p = m.startPod(mode, "")
		checkFiles(t, p.workspace, want) // nothing lost across the restart
		files := map[string][]byte{fmt.Sprintf("stage%d-%s.txt", i, mode): []byte(fmt.Sprintf("stage %d\n", i))}
		if i == 0 {
			files["media/hero.bin"] = big
		}
		for k, v := range files {
			want[k] = v
		}
		p.turn(t, files)

		wantSrc := "git"
		if mode != "git_only" {
			wantSrc = "s3"
		}
		src, listed := m.fileList()
		if src != wantSrc {
			t.Fatalf("stage %d (%s): reads from %s, want %s", i, mode, src, wantSrc)
		}
		if mode != "s3" || i > 0 {
			// S3 holds layer 2 per turn in s3/dual_shadow; git_only's
			// durable .git has every turn.
			for name := range files {
				if _, ok := listed[name]; !ok && wantSrc == "git" {
					t.Fatalf("stage %d: %s missing from the %s read: %v", i, name, src, listed)
				}
			}
		}
		if wantSrc == "s3" {
			for name := range files {
				if _, ok := listed[name]; !ok {
					t.Fatalf("stage %d: %s missing from the s3 read: %v", i, name, listed)
				}
			}
		}
		if mode == "git_only" && i == 2 {
			// dual_shadow → git_only: the offloaded asset migrated to
			// git-lfs on pod start (spec 10.3): its asset key is gone and
			// its bytes are a large-file object.
			assets, lfsObjs := m.countObjects("assets/"), m.countObjects("lfs/objects/")
			if assets != 0 || lfsObjs == 0 {
				t.Fatalf("after the git_only start: %d asset keys, %d lfs objects; want 0 and ≥ 1", assets, lfsObjs)
			}
		}
		if i+1 < len(stages) {
			next := stages[i+1]
			m.setMode(next)
			if mode == "git_only" && next == "dual_shadow" {
				// S3 is authoritative for reads again immediately, while
				// the git_only pod still runs.
				if src, _ := m.fileList(); src != "s3" {
					t.Fatalf("git_only → dual_shadow: reads from %s before the restart, want s3", src)
				}
			}
		}
	}
	p.stop(t)
	q := m.startPod("git_only", "")
	checkFiles(t, q.workspace, want)
	rep, code := m.parity()
	if res := projectResult(t, rep); res["status"] != "ok" || code != 0 {
		t.Fatalf("parity after the transitions: %v (exit %d)", res, code)
	}
}

// Rollback through the API: POST …/checkpoints/{sha}/restore reaches the
// project's pod (started by the API's local runtime driver with the mode
// of the project row) and makes a new commit whose tree is the
// checkpoint's, persisted and recorded like a turn; unknown and malformed
// shas are refused.
func TestRollbackThroughTheAPI(t *testing.T) {
	for _, mode := range []string{"git_only", "dual_shadow"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			s3 := testenv.MinIO(t)
			m := &modeEnv{env: e, t: t, s3: s3}
			bin, err := podagentBinary()
			must(t, err)
			dataDir := t.TempDir()
			m.api = e.startAPI(append(m.s3Vars(), "SVC_DATA_DIR="+dataDir, "SVC_PODAGENT_BIN="+bin)...)
			acc := e.account("free")
			m.key = acc.key
			m.project = e.admin("project", "create", "--workspace", acc.workspace, "--name", "site")["id"].(string)
			m.setMode(mode)
			base := m.api.URL + "/api/projects/" + m.project
			publish := func(sub string) string {
				t.Helper()
				var out wire.GitFlushResponse
				postJSON(t, "publish", base+"/publish", m.key, `{"subdomain":"`+sub+`"}`, &out)
				return out.SHA
			}
			publish("boot") // starts the pod (seed commit)
			ws := filepath.Join(dataDir, "runtimes", m.project, "workspace")
			must(t, os.WriteFile(filepath.Join(ws, "index.html"), []byte("v1\n"), 0o644))
			first := publish("one")
			must(t, os.WriteFile(filepath.Join(ws, "index.html"), []byte("v2\n"), 0o644))
			must(t, os.WriteFile(filepath.Join(ws, "extra.txt"), []byte("x\n"), 0o644))
			publish("two")

			resp, body := do(t, http.MethodPost, base+"/checkpoints/"+first+"/restore", m.key, nil, nil)
			if resp.StatusCode != 200 {
				t.Fatalf("restore: %d %s", resp.StatusCode, body)
			}
			var out wire.RestoreResponse
			must(t, json.Unmarshal(body, &out))
			if len(out.SHA) != 40 || out.RestoredFrom != first {
				t.Fatalf("restore answer %+v", out)
			}
			checkFiles(t, ws, map[string][]byte{"index.html": []byte("v1\n"), "extra.txt": nil})
			// The rollback is the durable head and has its row (turn 3).
			if _, st := m.read("/checkpoints/status"); st["head"] != out.SHA {
				t.Fatalf("status head %v, want the rollback commit %s", st["head"], out.SHA)
			}
			rep, code := m.parity()
			if res := projectResult(t, rep); res["status"] != "ok" || res["lastTurn"].(float64) != 3 || code != 0 {
				t.Fatalf("parity after rollback: %v (exit %d)", res, code)
			}
			for sha, want := range map[string]int{"0123456789abcdef0123456789abcdef01234567": 404, "not-a-sha": 400} {
				resp, body := do(t, http.MethodPost, base+"/checkpoints/"+sha+"/restore", m.key, nil, nil)
				if resp.StatusCode != want {
					t.Errorf("restore %s: %d %s, want %d", sha, resp.StatusCode, body, want)
				}
			}
		})
	}
}
