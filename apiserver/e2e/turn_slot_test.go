package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/testenv/fakeupstream"
	"github.com/svc-dev/svc/shared/wire"
)

// A rollback sent through the API while a webhook turn runs its tools (the
// agent writes six files, one write_file per model call, and is held after
// the second) waits for the turn's commit on the pod's one turn slot: the
// pod reaches its turn-waiting pause point while the turn is held, and the
// outcome is the serial order — the turn's commit holds all six files, and
// the rollback's commit right after it holds none of them. Real API, local
// driver, pod binary and PostgreSQL; the model is the fake upstream.
func TestRollbackDuringATurnEndToEnd(t *testing.T) {
	t.Parallel()
	hookDir := t.TempDir()
	const point = "turn-waiting"
	w, _ := webhookWorld(t, "SVC_POD_TEST_PAUSE_AT="+point, "SVC_POD_TEST_HOOK_DIR="+hookDir)
	ws := filepath.Join(w.dataDir, "runtimes", w.project, "workspace")
	gitOut := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("git", append([]string{"-C", ws}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}

	// The checkpoint: a first turn writes base.txt.
	w.e.upstream.Script(agentScript("base.txt", "base\n", "wrote the base", nil))
	if res, body := w.do(t, http.MethodPost, "/agent/channels/webhook/incoming", []byte(`{"message":"write the base"}`), hookHeaders()); res.StatusCode != 200 {
		t.Fatalf("first turn: %d %s", res.StatusCode, body)
	}
	checkpoint := gitOut("rev-parse", "HEAD")

	files := []string{"f1.txt", "f2.txt", "f3.txt", "f4.txt", "f5.txt", "f6.txt"}
	gate, arrived := make(chan struct{}), make(chan struct{})
	var opened sync.Once
	open := func() { opened.Do(func() { close(gate) }) }
	t.Cleanup(open)
	var calls atomic.Int32
	w.e.upstream.Script(func(fakeupstream.Request) fakeupstream.Reply {
		n := int(calls.Add(1)) - 1
		if n >= len(files) {
			return fakeupstream.Reply{Text: "Wrote six files.", PromptTokens: 30, CompletionTokens: 4}
		}
		rep := fakeupstream.Reply{PromptTokens: 20, CompletionTokens: 6, ToolCalls: []fakeupstream.ToolCall{{
			ID: fmt.Sprint("call_", n), Name: "write_file", Arguments: fmt.Sprintf(`{"path":%q,"content":"%d\n"}`, files[n], n)}}}
		if n == 2 { // two files are written; the turn is held here
			rep.Gate = gate
			close(arrived)
		}
		return rep
	})
	must(t, syscall.Mkfifo(filepath.Join(hookDir, point), 0o644))
	must(t, syscall.Mkfifo(filepath.Join(hookDir, point+".go"), 0o644))
	t.Cleanup(func() { // a pod still held at the point goes on (no reader: nothing to do)
		if f, err := os.OpenFile(filepath.Join(hookDir, point+".go"), os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_, _ = f.WriteString("go")
			_ = f.Close()
		}
	})

	type answer struct {
		status int
		body   []byte
		err    error
	}
	post := func(url, key, body string, hdr http.Header) answer {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header = hdr.Clone()
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return answer{err: err}
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return answer{status: res.StatusCode, body: b}
	}
	base := w.api.URL + "/api/projects/" + w.project
	turnDone := make(chan answer, 1)
	go func() {
		turnDone <- post(base+"/agent-proxy/agent/channels/webhook/incoming", w.acc.key,
			`{"message":"write six files"}`, hookHeaders())
	}()
	select {
	case <-arrived:
	case a := <-turnDone:
		t.Fatalf("the turn ended before its third model call: %d %s %v", a.status, a.body, a.err)
	}
	rollback := make(chan answer, 1)
	go func() { rollback <- post(base+"/checkpoints/"+checkpoint+"/restore", w.acc.key, "", http.Header{}) }()

	reached := make(chan struct{})
	go func() { _, _ = os.ReadFile(filepath.Join(hookDir, point)); close(reached) }()
	select {
	case <-reached: // the rollback waits for the slot while the turn is held
	case a := <-rollback:
		t.Fatalf("the rollback answered %d %s (%v) while the turn ran its tools: it ran beside them", a.status, a.body, a.err)
	case <-time.After(2 * time.Minute):
		t.Fatal("the rollback never waited for the turn")
	}
	must(t, os.Remove(filepath.Join(hookDir, point))) // later waits go on
	must(t, os.WriteFile(filepath.Join(hookDir, point+".go"), []byte("go"), 0o644))
	open()

	ta := <-turnDone
	if ta.err != nil || ta.status != 200 || !strings.Contains(string(ta.body), "Wrote six files.") {
		t.Fatalf("turn: %d %s %v", ta.status, ta.body, ta.err)
	}
	ra := <-rollback
	var rr wire.RestoreResponse
	_ = json.Unmarshal(ra.body, &rr)
	if ra.err != nil || ra.status != 200 || len(rr.SHA) != 40 || rr.RestoredFrom != checkpoint {
		t.Fatalf("rollback: %d %s %v", ra.status, ra.body, ra.err)
	}
	turnSHA := gitOut("log", "-1", "--format=%H", "--grep=^webhook: write six files")
	if got := strings.Fields(gitOut("show", "--name-only", "--format=", turnSHA)); !slices.Equal(got, files) {
		t.Fatalf("the turn's commit holds %v: want all six files", got)
	}
	if head := gitOut("rev-parse", "HEAD"); head != rr.SHA || gitOut("rev-parse", "HEAD^") != turnSHA {
		t.Fatalf("head %s (parent %s): want the rollback %s right after the turn %s", head, gitOut("rev-parse", "HEAD^"), rr.SHA, turnSHA)
	}
	if gitOut("rev-parse", "HEAD^{tree}") != gitOut("rev-parse", checkpoint+"^{tree}") {
		t.Fatalf("the head's tree is not the checkpoint's: %s", gitOut("ls-tree", "--name-only", "HEAD"))
	}
}
