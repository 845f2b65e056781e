package webhook_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/podagent/internal/agentloop/fakegateway"
	"github.com/svc-dev/svc/podagent/internal/config"
	"github.com/svc-dev/svc/podagent/internal/pod"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/wire"
)

// sixFiles are what the scripted agent writes, one write_file per model call.
var sixFiles = []string{"f1.txt", "f2.txt", "f3.txt", "f4.txt", "f5.txt", "f6.txt"}

// A rollback or a git-flush sent while an agent turn runs its tools takes
// the pod's one turn slot after the turn: the turn's commit holds all six
// files the agent wrote, and the rollback either comes after it (the head
// holds none of them) or is refused with 409 turn_in_progress when its
// caller's deadline is shorter than the turn (the head holds all six). The
// agent is held after its second write_file (the model's third answer is
// gated) until the rollback is seen waiting for the slot on /metrics.
func TestRollbackAndFlushDuringATurnTakeTheSlotAfterIt(t *testing.T) {
	t.Parallel()
	testenv.RequireTool(t, "git")
	cases := []struct {
		name    string
		path    string
		body    func(before string) string
		timeout time.Duration // X-Svc-Timeout-Ms (0: none)
		check   func(t *testing.T, g gitView, before, turnSHA string, status int, body []byte, hdr http.Header)
	}{
		{name: "rollback waits for the commit", path: "/agent/restore",
			body: func(before string) string { return `{"sha":"` + before + `"}` },
			check: func(t *testing.T, g gitView, before, turnSHA string, status int, body []byte, _ http.Header) {
				var rr wire.RestoreResponse
				_ = json.Unmarshal(body, &rr)
				if status != 200 || rr.SHA == "" {
					t.Fatalf("restore: %d %s", status, body)
				}
				head := g.out("rev-parse", "HEAD")
				if rr.SHA != head || g.out("rev-parse", "HEAD^") != turnSHA {
					t.Fatalf("restore commit %s, head %s (parent %s), turn %s: want the rollback right after the turn",
						rr.SHA, head, g.out("rev-parse", "HEAD^"), turnSHA)
				}
				if g.out("rev-parse", "HEAD^{tree}") != g.out("rev-parse", before+"^{tree}") {
					t.Fatalf("the head's tree is not the checkpoint's: %q", g.out("ls-tree", "--name-only", "HEAD"))
				}
			}},
		{name: "rollback refused when the turn outlasts its deadline", path: "/agent/restore",
			body:    func(before string) string { return `{"sha":"` + before + `"}` },
			timeout: 2 * time.Second,
			check: func(t *testing.T, g gitView, _, turnSHA string, status int, body []byte, hdr http.Header) {
				var eb wire.ErrorBody
				_ = json.Unmarshal(body, &eb)
				if status != http.StatusConflict || eb.Error.Code != "turn_in_progress" || hdr.Get("Retry-After") == "" {
					t.Fatalf("restore: %d %s Retry-After %q: want 409 turn_in_progress with Retry-After", status, body, hdr.Get("Retry-After"))
				}
				if head := g.out("rev-parse", "HEAD"); head != turnSHA {
					t.Fatalf("head %s, turn %s: a refused rollback commits nothing", head, turnSHA)
				}
			}},
		{name: "git-flush waits for the commit", path: "/agent/git-flush", body: func(string) string { return "" },
			check: func(t *testing.T, g gitView, before, turnSHA string, status int, body []byte, _ http.Header) {
				var fr wire.GitFlushResponse
				_ = json.Unmarshal(body, &fr)
				if status != 200 || fr.SHA != turnSHA {
					t.Fatalf("flush: %d %s: want the turn's commit %s as the head", status, body, turnSHA)
				}
				if n := g.out("rev-list", "--count", before+"..HEAD"); n != "1" {
					t.Fatalf("%s commits after the checkpoint: want the turn's alone (a flush cut into it)", n)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, srv, gw, g := startTurnPod(t)
			before := g.out("rev-parse", "HEAD")

			gate, arrived := make(chan struct{}), make(chan struct{})
			var opened sync.Once
			open := func() { opened.Do(func() { close(gate) }) }
			t.Cleanup(open) // a failed test lets the turn end before the pod shuts down
			var calls atomic.Int32
			gw.Script(func(fakegateway.Request) fakegateway.Reply {
				n := int(calls.Add(1)) - 1
				if n >= len(sixFiles) {
					return fakegateway.Reply{Text: "Wrote six files."}
				}
				rep := fakegateway.Reply{ToolCalls: []fakegateway.ToolCall{{ID: fmt.Sprint(n), Name: "write_file",
					Arguments: fmt.Sprintf(`{"path":%q,"content":"%d\n"}`, sixFiles[n], n)}}}
				if n == 2 { // two files are written; the turn is held here
					rep.Gate = gate
					close(arrived)
				}
				return rep
			})
			post := func(path, body string, hdr map[string]string) answer {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+turnToken)
				for k, v := range hdr {
					req.Header.Set(k, v)
				}
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					return answer{err: err}
				}
				defer res.Body.Close()
				b, _ := io.ReadAll(res.Body)
				return answer{status: res.StatusCode, body: b, hdr: res.Header}
			}
			turnDone := make(chan answer, 1)
			go func() {
				turnDone <- post("/agent/channels/webhook/incoming", `{"message":"write six files","senderId":"ci"}`,
					map[string]string{"X-Webhook-Secret": "sec"})
			}()
			select {
			case <-arrived:
			case a := <-turnDone:
				t.Fatalf("the turn ended before its third model call: %d %s %v", a.status, a.body, a.err)
			}
			hdr := map[string]string{"Content-Type": "application/json"}
			if tc.timeout > 0 {
				hdr[internalapi.HeaderTimeout] = fmt.Sprint(tc.timeout.Milliseconds())
			}
			cutDone := make(chan answer, 1)
			go func() { cutDone <- post(tc.path, tc.body(before), hdr) }()

			var cut answer
			if tc.timeout > 0 {
				cut = <-cutDone // refused while the turn is still held
			} else {
				waitForWaitingTurn(t, srv.URL, cutDone)
			}
			open()
			turnAns := <-turnDone
			if turnAns.err != nil || turnAns.status != 200 || !strings.Contains(string(turnAns.body), "Wrote six files.") {
				t.Fatalf("turn: %d %s %v", turnAns.status, turnAns.body, turnAns.err)
			}
			if tc.timeout == 0 {
				cut = <-cutDone
			}
			if cut.err != nil {
				t.Fatal(cut.err)
			}
			turnSHA := g.out("log", "-1", "--format=%H", "--grep=^webhook: write six files")
			if files := strings.Fields(g.out("show", "--name-only", "--format=", turnSHA)); !slices.Equal(files, sixFiles) {
				t.Fatalf("the turn's commit holds %v: want all six files", files)
			}
			tc.check(t, g, before, turnSHA, cut.status, cut.body, cut.hdr)
			if status := g.out("status", "--porcelain"); status != "" {
				t.Fatalf("uncommitted after both turns: %q", status)
			}
		})
	}
}

// answer is an HTTP answer read whole.
type answer struct {
	status int
	body   []byte
	hdr    http.Header
	err    error
}

const turnProject, turnToken = "prj_slot", "svc_rt_prj_slot.test"

type gitView struct {
	t  *testing.T
	ws string
}

func (g gitView) out(args ...string) string {
	g.t.Helper()
	out, err := exec.Command("git", append([]string{"-C", g.ws}, args...)...).CombinedOutput()
	if err != nil {
		g.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// startTurnPod starts a git_only pod (fs store) whose work tree has one
// commit, the checkpoint a rollback goes back to.
func startTurnPod(t *testing.T) (*pod.Pod, *httptest.Server, *fakegateway.Server, gitView) {
	t.Helper()
	gw := fakegateway.New(t, turnProject, turnToken)
	gw.SetChannel(wire.ChannelConfig{Configured: true, ChannelID: "ch_1", Secret: "sec"}, 0)
	dir := t.TempDir()
	env := map[string]string{"SVC_PROJECT_ID": turnProject, "SVC_RUNTIME_TOKEN": turnToken, "SVC_API_URL": gw.URL,
		"SVC_DATA_DIR": filepath.Join(dir, "data"), "SVC_WORKSPACE_DIR": filepath.Join(dir, "ws"), "SVC_LFS": "false"}
	cfg, err := config.Parse("test", nil, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	log := zaptest.NewLogger(t)
	store, err := pod.OpenStore(ctx, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	p, err := pod.Start(ctx, pod.Options{Config: cfg, Store: store, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Shutdown(context.Background()) })
	srv := httptest.NewServer(p.Echo)
	t.Cleanup(srv.Close)
	g := gitView{t: t, ws: cfg.WorkspaceDir}
	if err := os.WriteFile(filepath.Join(cfg.WorkspaceDir, "README.md"), []byte("# checkpoint\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if sha, err := p.Turn(ctx, "checkpoint"); err != nil || sha == "" {
		t.Fatalf("checkpoint commit %q: %v", sha, err)
	}
	return p, srv, gw, g
}

// waitForWaitingTurn reads the pod's /metrics until one turn waits for the
// slot (svc_podagent_turns_waiting 1); the waiting request must not have
// been answered by then.
func waitForWaitingTurn(t *testing.T, base string, answered <-chan answer) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for turnsWaiting(t, base) != 1 {
		select {
		case a := <-answered:
			t.Fatalf("answered %d %s while the turn held the slot: it ran beside the turn's tools", a.status, a.body)
		case <-deadline:
			t.Fatal("no turn waited for the slot")
		case <-tick.C:
		}
	}
}

// turnsWaiting reads svc_podagent_turns_waiting from /metrics.
func turnsWaiting(t *testing.T, base string) int {
	t.Helper()
	res, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "svc_podagent_turns_waiting "); ok {
			var n float64
			fmt.Sscan(v, &n)
			return int(n)
		}
	}
	t.Fatal("/metrics has no svc_podagent_turns_waiting")
	return 0
}
