package e2e

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/objstore"
	s3store "github.com/svc-dev/svc/shared/objstore/s3"
)

// Fencing in every sync mode (docs/sync-modes.md §11): two real
// podagent processes of one project on real MinIO, with the real apiserver
// as the dual_shadow origin and the read side.

var fencingModes = []string{"s3", "dual_shadow", "git_only"}

// tryFlush posts a git-flush and returns the status and body (no failure).
func (p *modePod) tryFlush() (int, string) {
	req, _ := http.NewRequest(http.MethodPost, p.URL+"/agent/git-flush", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+p.token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// write writes one file of the pod's work tree.
func (p *modePod) write(t testing.TB, name, body string) {
	t.Helper()
	path := filepath.Join(p.workspace, filepath.FromSlash(name))
	must(t, os.MkdirAll(filepath.Dir(path), 0o755))
	must(t, os.WriteFile(path, []byte(body), 0o644))
}

// kill is kill -9; it returns once the process is gone.
func (p *modePod) kill() {
	p.once.Do(func() {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	})
}

func (p *modePod) ready() int {
	res, err := http.Get(p.URL + "/readyz")
	if err != nil {
		return 0
	}
	res.Body.Close()
	return res.StatusCode
}

// turnFile is the file turn n writes; its body is its name.
func turnFile(n string) string { return "turns/" + n + ".txt" }

// ledger records which turns were acknowledged (git-flush 200 with a sha)
// and which were written by a pod that had lost the project.
type ledger struct {
	acked, lost []string
}

// turn writes turn n's file and flushes; it reports whether the turn was
// acknowledged.
func (l *ledger) turn(t testing.TB, p *modePod, n string) bool {
	t.Helper()
	p.write(t, turnFile(n), n)
	code, body := p.tryFlush()
	if code == 200 && strings.Contains(body, `"sha"`) {
		l.acked = append(l.acked, n)
		return true
	}
	return false
}

// requireReadSource fails unless …/checkpoints/files (the mode's read
// source: S3's layer 2 and assets in s3/dual_shadow, the durable .git in
// git_only) lists every acknowledged turn's file and none of the lost ones.
func (m *modeEnv) requireReadSource(t testing.TB, mode string, l *ledger) {
	t.Helper()
	src, files := m.fileList()
	if want := map[string]string{"s3": "s3", "dual_shadow": "s3", "git_only": "git"}[mode]; src != want {
		t.Fatalf("read source %q, want %q", src, want)
	}
	for _, n := range l.acked {
		if _, ok := files[turnFile(n)]; !ok {
			t.Errorf("acknowledged turn %s is missing from the read source (%s): %v", n, src, files)
		}
	}
	for _, n := range l.lost {
		if _, ok := files[turnFile(n)]; ok {
			t.Errorf("turn %s, written by a pod that had lost the project, is visible in the read source", n)
		}
	}
}

// requireWorkspace fails unless a fresh pod's work tree holds every
// acknowledged turn and none of the lost ones.
func requireWorkspace(t testing.TB, ws string, l *ledger) {
	t.Helper()
	for _, n := range l.acked {
		if b, err := os.ReadFile(filepath.Join(ws, turnFile(n))); err != nil || string(b) != n {
			t.Errorf("acknowledged turn %s is missing after a cold start: %q %v", n, b, err)
		}
	}
	for _, n := range l.lost {
		if _, err := os.Stat(filepath.Join(ws, turnFile(n))); err == nil {
			t.Errorf("turn %s, written by a pod that had lost the project, reached a cold start", n)
		}
	}
}

func (m *modeEnv) objects() objstore.Store {
	m.t.Helper()
	s, err := s3store.New(context.Background(), s3store.Config{Endpoint: m.s3.Endpoint, Bucket: m.s3.Bucket,
		AccessKey: m.s3.AccessKey, SecretKey: m.s3.SecretKey})
	must(m.t, err)
	return s
}

// etags returns the ETags of the project's mutable objects.
func (m *modeEnv) etags() map[string]string {
	m.t.Helper()
	out := map[string]string{}
	s := m.objects()
	for _, k := range []string{objstore.SourceKey(m.project), objstore.RepoKey(m.project), objstore.RepoManifestKey(m.project), objstore.OwnerKey(m.project)} {
		if info, err := s.Head(context.Background(), k); err == nil {
			out[k] = info.ETag
		}
	}
	return out
}

// hooks prepares pause points in a fresh directory: the pod runs with
// SVC_TEST_PAUSE_AT=point and SVC_TEST_HOOK_DIR=dir; arm creates the FIFOs
// once the pod is ready (so start-up writes do not stop), reached waits
// until the pod is held there, release lets it go on (later passes do not
// stop).
type hooks struct {
	t     testing.TB
	dir   string
	point string
}

func newHooks(t testing.TB, point string) *hooks {
	return &hooks{t: t, dir: t.TempDir(), point: point}
}

func (h *hooks) env() []string {
	return []string{"SVC_TEST_PAUSE_AT=" + h.point, "SVC_TEST_HOOK_DIR=" + h.dir}
}

func (h *hooks) arm(hold bool) {
	h.t.Helper()
	must(h.t, syscall.Mkfifo(filepath.Join(h.dir, h.point), 0o644))
	if hold {
		must(h.t, syscall.Mkfifo(filepath.Join(h.dir, h.point+".go"), 0o644))
	}
}

func (h *hooks) reached(p *modePod) {
	h.t.Helper()
	got := make(chan struct{})
	go func() { _, _ = os.ReadFile(filepath.Join(h.dir, h.point)); close(got) }()
	select {
	case <-got:
	case <-time.After(60 * time.Second):
		h.t.Fatalf("the pod never reached %s\n%s", h.point, p.logs.String())
	}
	// Later passes through the point go on: the pod is held only once.
	must(h.t, os.Remove(filepath.Join(h.dir, h.point)))
}

func (h *hooks) release() {
	h.t.Helper()
	must(h.t, os.WriteFile(filepath.Join(h.dir, h.point+".go"), []byte("go"), 0o644))
}

// Two pods of one project, in every mode: the second pod's claim fences the
// first. Afterwards exactly one side acknowledges; the first pod answers
// 409 fenced, is unready, logs FENCED once and writes nothing more (its
// SIGTERM shutdown neither); every acknowledged turn of either pod is in
// the read source and in a cold start; nothing the first pod wrote after
// losing is visible anywhere.
func TestTwoPodsOfOneProjectFenceInEveryMode(t *testing.T) {
	for _, mode := range fencingModes {
		t.Run(mode, func(t *testing.T) {
			m := newModeEnv(t)
			m.setMode(mode)
			l := &ledger{}
			a := m.startPod(mode, "")
			for _, n := range []string{"a1", "a2"} {
				if !l.turn(t, a, n) {
					t.Fatalf("pod A's turn %s was not acknowledged\n%s", n, a.logs.String())
				}
			}
			b := m.startPod(mode, "")

			for _, n := range []string{"a-late1", "a-late2"} {
				a.write(t, turnFile(n), n)
				code, body := a.tryFlush()
				if code != http.StatusConflict || !strings.Contains(body, "fenced") {
					t.Fatalf("pod A's flush after B claimed the project: %d %s, want 409 fenced", code, body)
				}
				l.lost = append(l.lost, n)
			}
			if st := a.ready(); st != http.StatusServiceUnavailable {
				t.Errorf("fenced pod A: /readyz %d, want 503", st)
			}
			for _, n := range []string{"b1", "b2"} {
				if !l.turn(t, b, n) {
					t.Fatalf("pod B's turn %s was not acknowledged\n%s", n, b.logs.String())
				}
			}
			before := m.etags()
			a.stop(t) // SIGTERM: the shutdown sequence must not write either
			if after := m.etags(); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("the fenced pod's shutdown wrote: %v → %v", before, after)
			}
			if n := strings.Count(a.logs.String(), "FENCED"); n != 1 {
				t.Errorf("pod A logged FENCED %d times, want once\n%s", n, a.logs.String())
			}
			if strings.Contains(b.logs.String(), "FENCED") {
				t.Errorf("pod B was fenced\n%s", b.logs.String())
			}
			m.requireReadSource(t, mode, l)
			b.stop(t)
			c := m.startPod(mode, "")
			requireWorkspace(t, c.workspace, l)
		})
	}
}

// dual_shadow: a push the API refuses because another pod owns the project
// (409 fenced, the epoch of the push is not the ownership record's) fences
// the pod — unlike the origin being down, which degrades and keeps the pod
// ready (TestDualShadowDegradesAndRecoversWithTheOriginDown). The old pod is
// held after its ownership check, just before its push, while the new pod
// claims; released, its push is refused and no row is written for it.
func TestDualShadowPushRefusedAsNotOwnerFences(t *testing.T) {
	m := newModeEnv(t)
	m.setMode("dual_shadow")
	h := newHooks(t, "before-push")
	a := m.startPod("dual_shadow", "", h.env()...)
	l := &ledger{}
	if !l.turn(t, a, "a1") {
		t.Fatalf("a1 not acknowledged\n%s", a.logs.String())
	}
	h.arm(true)
	a.write(t, turnFile("a2"), "a2")
	done := make(chan int, 1)
	go func() { code, _ := a.tryFlush(); done <- code }()
	h.reached(a)
	b := m.startPod("dual_shadow", "")
	h.release()
	if code := <-done; code != http.StatusConflict {
		t.Fatalf("the held pod's flush: %d, want 409 fenced\n%s", code, a.logs.String())
	}
	// The 409 can reach the test before the pod's log line has come through
	// its output pipe: wait for the line, then count.
	waitLog(t, a.logs, "FENCED", 10*time.Second)
	logs := a.logs.String()
	if strings.Count(logs, "FENCED") != 1 || !strings.Contains(logs, "refused the push") {
		t.Fatalf("the refused push did not fence the pod once:\n%s", logs)
	}
	if st := a.ready(); st != http.StatusServiceUnavailable {
		t.Errorf("/readyz %d, want 503", st)
	}
	// The origin kept only the acknowledged turn: one row (turn 1). (Layer
	// 2, written before the push, names the refused commit until the new
	// pod's next turn: parity reports that mismatch meanwhile.)
	rep, _ := m.parity()
	if res := projectResult(t, rep); res["lastTurn"].(float64) != 1 || res["turns"].(float64) != 1 {
		t.Fatalf("parity after the refused push: %v, want only turn 1", res)
	}
	if !l.turn(t, b, "b1") {
		t.Fatalf("b1 not acknowledged\n%s", b.logs.String())
	}
	m.requireReadSource(t, "dual_shadow", l)
	if rep, code := m.parity(); projectResult(t, rep)["status"] != "ok" || code != 0 {
		t.Fatalf("parity after the new pod's turn: %v (exit %d)", rep, code)
	}
}

// The kill -9 loop of the pause points, in every mode: a pod is killed at
// each point of its mode in turn (random order) mid-flush and restarted on
// the same disk; then the variant — the replacement pod starts on a fresh
// disk while the old pod is held at a point mid-write, acknowledges a turn,
// and the old pod is released (its write is refused: 409 fenced) and killed.
// 0 acknowledged turns lost: every one is in the read source and in a last
// cold start; no turn of a pod held while it lost is visible.
func TestKill9LoopWithReplacementInEveryMode(t *testing.T) {
	points := map[string][]string{
		"s3":          {"after-commit", "before-write"},
		"dual_shadow": {"after-commit", "before-write", "before-push", "after-persist"},
		"git_only":    {"after-commit", "before-write", "mid-upload", "after-persist"},
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for _, mode := range fencingModes {
		t.Run(mode, func(t *testing.T) {
			m := newModeEnv(t)
			m.setMode(mode)
			l := &ledger{}
			ws := filepath.Join(t.TempDir(), "ws")
			n := 0
			next := func() string { n++; return fmt.Sprintf("t%d", n) }

			// kill -9 at every point, restarting on the same disk.
			pts := points[mode]
			for _, i := range rng.Perm(len(pts)) {
				h := newHooks(t, pts[i])
				p := m.startPod(mode, ws, h.env()...)
				if !l.turn(t, p, next()) {
					t.Fatalf("turn before the kill at %s not acknowledged\n%s", pts[i], p.logs.String())
				}
				h.arm(false)
				name := next()
				p.write(t, turnFile(name), name)
				done := make(chan struct{})
				go func() { _, _ = p.tryFlush(); close(done) }()
				h.reached(p)
				p.kill()
				<-done // killed before its answer: not acknowledged (it may still be durable)
			}

			// The replacement starts while the old pod is held mid-write.
			for _, i := range rng.Perm(len(pts)) {
				point := pts[i]
				if point == "after-commit" || point == "after-persist" || point == "mid-upload" {
					// Not mid-write; or, mid-upload, MinIO holds the object's
					// lock under the stalled PUT and the replacement's restore
					// waits ~30 s for it (before-write holds the same turn
					// after its ownership check, before the PUT).
					continue
				}
				h := newHooks(t, point)
				old := m.startPod(mode, ws, h.env()...)
				if !l.turn(t, old, next()) {
					t.Fatalf("turn before the hold at %s not acknowledged\n%s", point, old.logs.String())
				}
				h.arm(true)
				held := next()
				old.write(t, turnFile(held), held)
				code := make(chan int, 1)
				go func() { c, _ := old.tryFlush(); code <- c }()
				h.reached(old)
				ws = filepath.Join(t.TempDir(), "ws")
				repl := m.startPod(mode, ws)
				if !l.turn(t, repl, next()) {
					t.Fatalf("the replacement's turn not acknowledged\n%s", repl.logs.String())
				}
				h.release()
				if c := <-code; c != http.StatusConflict {
					t.Fatalf("the held pod (%s) answered %d after the replacement's turn, want 409 fenced\n%s", point, c, old.logs.String())
				}
				if c, body := old.tryFlush(); c != http.StatusConflict {
					t.Fatalf("the held pod's next flush: %d %s, want 409 fenced", c, body)
				}
				if point != "before-push" {
					// Held before its first write: nothing of the turn was
					// written before the replacement claimed. (Before the push,
					// layer 2 already holds it, and the replacement took it over.)
					l.lost = append(l.lost, held)
				}
				old.kill()
				// Right after the held write was let go: the replacement's
				// acknowledged turn is still there.
				m.requireReadSource(t, mode, l)
				if !l.turn(t, repl, next()) {
					t.Fatalf("the replacement's turn after the old pod was released not acknowledged\n%s", repl.logs.String())
				}
				repl.stop(t)
			}

			m.requireReadSource(t, mode, l)
			last := m.startPod(mode, "")
			requireWorkspace(t, last.workspace, l)
			t.Logf("%s: %d turns acknowledged, 0 lost; kill -9 at %v; replacement while held mid-write", mode, len(l.acked), pts)
		})
	}
}

// A generation change while the old pod is held mid-flush, with the
// environment the Kubernetes driver gives its pods
// (SVC_POD_GENERATION): the new generation's pod claims the project and
// acknowledges; the old pod, released, is refused (409 fenced); restarted on
// its disk (the kubelet restarting the container of a pod being replaced),
// it does not take the project back — fenced at start, unready — and the
// new pod keeps acknowledging. No acknowledged turn is lost.
func TestGenerationChangeWhileOldPodHeldMidFlush(t *testing.T) {
	for _, mode := range fencingModes {
		t.Run(mode, func(t *testing.T) {
			m := newModeEnv(t)
			m.setMode(mode)
			l := &ledger{}
			h := newHooks(t, "before-write")
			oldWS := filepath.Join(t.TempDir(), "ws")
			old := m.startPod(mode, oldWS, append(h.env(), "SVC_POD_GENERATION=1")...)
			if !l.turn(t, old, "g1-a") {
				t.Fatalf("generation 1's turn not acknowledged\n%s", old.logs.String())
			}
			h.arm(true)
			old.write(t, turnFile("g1-held"), "g1-held")
			code := make(chan int, 1)
			go func() { c, _ := old.tryFlush(); code <- c }()
			h.reached(old)

			next := m.startPod(mode, "", "SVC_POD_GENERATION=2")
			if !l.turn(t, next, "g2-a") {
				t.Fatalf("generation 2's turn not acknowledged\n%s", next.logs.String())
			}
			h.release()
			if c := <-code; c != http.StatusConflict {
				t.Fatalf("generation 1, released: %d, want 409 fenced\n%s", c, old.logs.String())
			}
			l.lost = append(l.lost, "g1-held")
			old.kill()

			again := m.launchPod(mode, oldWS, "SVC_POD_GENERATION=1")
			waitLog(t, again.logs, "podagent serving", 60*time.Second)
			if st := again.ready(); st != http.StatusServiceUnavailable {
				t.Fatalf("restarted generation 1: /readyz %d, want 503", st)
			}
			if !strings.Contains(again.logs.String(), "newer than this pod's 1") {
				t.Fatalf("restarted generation 1 was not fenced by the generation:\n%s", again.logs.String())
			}
			if !l.turn(t, next, "g2-b") {
				t.Fatalf("generation 2 lost the project to a restarted generation 1\n%s", next.logs.String())
			}
			m.requireReadSource(t, mode, l)
		})
	}
}
