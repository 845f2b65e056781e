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
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/testenv/fakeupstream"
	"github.com/svc-dev/svc/shared/wire"
)

// The scenario of a user who acts while the agent types: the model makes
// the agent call write_file six times, 0.8 s apart (the fake upstream
// answers each call after 0.8 s), and a second request arrives through the
// API 2 s into the turn, with two files written and four to come. Nothing
// in the pod is paused: the outcome must be one of the serial orders of the
// two, whatever the timing of the machine.
type serialTurn struct {
	w          *proxyWorld
	ws         string
	checkpoint string // the head before the turn (base.txt only)
	files      []string
}

// answer is an HTTP answer taken in a goroutine.
type answer struct {
	status int
	body   []byte
	err    error
}

func (a answer) String() string { return fmt.Sprintf("%d %s (%v)", a.status, a.body, a.err) }

func postAnswer(url, key, body string, hdr http.Header) answer {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
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

func newSerialTurn(t *testing.T) *serialTurn {
	t.Helper()
	w, _ := webhookWorld(t)
	s := &serialTurn{w: w, ws: filepath.Join(w.dataDir, "runtimes", w.project, "workspace"),
		files: []string{"f1.txt", "f2.txt", "f3.txt", "f4.txt", "f5.txt", "f6.txt"}}
	w.e.upstream.Script(agentScript("base.txt", "base\n", "wrote the base", nil))
	if res, body := w.do(t, http.MethodPost, "/agent/channels/webhook/incoming", []byte(`{"message":"write the base"}`), hookHeaders()); res.StatusCode != 200 {
		t.Fatalf("first turn: %d %s", res.StatusCode, body)
	}
	s.checkpoint = s.git(t, "rev-parse", "HEAD")
	return s
}

func (s *serialTurn) git(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", s.ws}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// run starts the six-file turn, sends second (the request under test) 2 s
// after the turn's first model call, and returns both answers.
func (s *serialTurn) run(t *testing.T, second func() answer) (turn, other answer) {
	t.Helper()
	first := make(chan struct{})
	var calls atomic.Int32
	s.w.e.upstream.Script(func(fakeupstream.Request) fakeupstream.Reply {
		n := int(calls.Add(1)) - 1
		if n == 0 {
			close(first)
		}
		slow := make(chan struct{}) // the model's 0.8 s per call
		time.AfterFunc(800*time.Millisecond, func() { close(slow) })
		if n >= len(s.files) {
			return fakeupstream.Reply{Text: "Wrote six files.", PromptTokens: 30, CompletionTokens: 4, Gate: slow}
		}
		return fakeupstream.Reply{PromptTokens: 20, CompletionTokens: 6, Gate: slow, ToolCalls: []fakeupstream.ToolCall{{
			ID: fmt.Sprint("call_", n), Name: "write_file", Arguments: fmt.Sprintf(`{"path":%q,"content":"%d\n"}`, s.files[n], n)}}}
	})
	base := s.w.api.URL + "/api/projects/" + s.w.project
	turnDone := make(chan answer, 1)
	go func() {
		turnDone <- postAnswer(base+"/agent-proxy/agent/channels/webhook/incoming", s.w.acc.key,
			`{"message":"write six files"}`, hookHeaders())
	}()
	select {
	case <-first:
	case a := <-turnDone:
		t.Fatalf("the turn ended before its first model call: %v", a)
	}
	otherDone := make(chan answer, 1)
	time.AfterFunc(2*time.Second, func() { otherDone <- second() })
	turn, other = <-turnDone, <-otherDone
	if turn.err != nil || turn.status != 200 || !strings.Contains(string(turn.body), "Wrote six files.") {
		t.Fatalf("turn: %v", turn)
	}
	return turn, other
}

// sixIn counts the six files in a commit's tree.
func (s *serialTurn) sixIn(t *testing.T, rev string) int {
	t.Helper()
	n := 0
	for _, p := range strings.Fields(s.git(t, "ls-tree", "--name-only", rev)) {
		if slices.Contains(s.files, p) {
			n++
		}
	}
	return n
}

// turnCommit is the turn's own commit; it must add all six files.
func (s *serialTurn) turnCommit(t *testing.T) string {
	t.Helper()
	sha := s.git(t, "log", "-1", "--format=%H", "--grep=^webhook: write six files")
	if sha == "" {
		t.Fatalf("no commit of the turn:\n%s", s.git(t, "log", "--format=%h %s"))
	}
	if got := strings.Fields(s.git(t, "show", "--name-only", "--format=", sha)); !slices.Equal(got, s.files) {
		t.Fatalf("the turn's commit holds %v: want all six files\n%s", got, s.git(t, "log", "--stat", "--format=%h %s", s.checkpoint+"..HEAD"))
	}
	return sha
}

// noHalfTree fails when a commit after the checkpoint holds some but not
// all six files: a half-written tree committed.
func (s *serialTurn) noHalfTree(t *testing.T) {
	t.Helper()
	for _, c := range strings.Fields(s.git(t, "rev-list", s.checkpoint+"..HEAD")) {
		if n := s.sixIn(t, c); n != 0 && n != len(s.files) {
			t.Fatalf("commit %s holds %d of the six files: a half-written tree\n%s", c, n,
				s.git(t, "log", "--stat", "--format=%h %s", s.checkpoint+"..HEAD"))
		}
	}
}

// onDisk checks that the work tree holds exactly the six files the head
// holds (all or none).
func (s *serialTurn) onDisk(t *testing.T, want bool) {
	t.Helper()
	for _, f := range s.files {
		_, err := os.Stat(filepath.Join(s.ws, f))
		if got := err == nil; got != want {
			t.Fatalf("%s on disk: %v, want %v (the head holds all or none)", f, got, want)
		}
	}
}

// A rollback sent through the API 2 s into a turn of six slow write_file
// calls ends in one of the two serial orders: the head holds all six files
// (the rollback refused with 409 turn_in_progress, or run before the turn,
// which then committed on top), or none of them, with the turn's own commit
// holding all six right below the rollback's.
func TestRollbackTwoSecondsIntoASlowTurn(t *testing.T) {
	t.Parallel()
	s := newSerialTurn(t)
	url := s.w.api.URL + "/api/projects/" + s.w.project + "/checkpoints/" + s.checkpoint + "/restore"
	_, rb := s.run(t, func() answer { return postAnswer(url, s.w.acc.key, "", http.Header{}) })
	turnSHA := s.turnCommit(t)
	s.noHalfTree(t)
	head := s.git(t, "rev-parse", "HEAD")
	switch n := s.sixIn(t, "HEAD"); {
	case n == len(s.files):
		// The rollback was refused, or ran before the turn's tools.
		if rb.status != http.StatusConflict && rb.status != http.StatusOK {
			t.Fatalf("rollback: %v", rb)
		}
		if rb.status == http.StatusConflict && !strings.Contains(string(rb.body), "turn_in_progress") {
			t.Fatalf("rollback refused without turn_in_progress: %v", rb)
		}
		if head != turnSHA {
			t.Fatalf("head %s, want the turn's commit %s", head, turnSHA)
		}
		s.onDisk(t, true)
		t.Logf("serial order: the head holds all six files (rollback answered %d)", rb.status)
	case n == 0:
		var rr wire.RestoreResponse
		if rb.err != nil || rb.status != 200 || json.Unmarshal(rb.body, &rr) != nil || len(rr.SHA) != 40 || rr.RestoredFrom != s.checkpoint {
			t.Fatalf("rollback: %v", rb)
		}
		if head != rr.SHA || s.git(t, "rev-parse", "HEAD^") != turnSHA {
			t.Fatalf("head %s (parent %s): want the rollback %s right after the turn %s", head, s.git(t, "rev-parse", "HEAD^"), rr.SHA, turnSHA)
		}
		if s.git(t, "rev-parse", "HEAD^{tree}") != s.git(t, "rev-parse", s.checkpoint+"^{tree}") {
			t.Fatalf("the head's tree is not the checkpoint's: %s", s.git(t, "ls-tree", "--name-only", "HEAD"))
		}
		s.onDisk(t, false)
		t.Logf("serial order: the turn's commit holds all six files, the rollback's commit after it none")
	default:
		t.Fatalf("the head holds %d of the six files", n)
	}
}

// A publish (the API's route to the pod's POST /agent/git-flush with a tag)
// sent 2 s into a turn of six slow write_file calls never commits a
// half-written tree as a turn: the published commit holds all six files or
// none, and the turn's own commit holds all six.
func TestGitFlushTwoSecondsIntoASlowTurn(t *testing.T) {
	t.Parallel()
	s := newSerialTurn(t)
	url := s.w.api.URL + "/api/projects/" + s.w.project + "/publish"
	_, pub := s.run(t, func() answer {
		return postAnswer(url, s.w.acc.key, `{"subdomain":"serial"}`, http.Header{"Content-Type": {"application/json"}})
	})
	turnSHA := s.turnCommit(t)
	s.noHalfTree(t)
	if head := s.git(t, "rev-parse", "HEAD"); head != turnSHA {
		t.Fatalf("head %s, want the turn's commit %s (a flush after it has nothing to commit)", head, turnSHA)
	}
	s.onDisk(t, true)
	if pub.status == http.StatusConflict {
		if !strings.Contains(string(pub.body), "turn_in_progress") {
			t.Fatalf("publish refused without turn_in_progress: %v", pub)
		}
		t.Logf("serial order: the publish was refused (409 turn_in_progress)")
		return
	}
	var out wire.GitFlushResponse
	if pub.err != nil || pub.status != 200 || json.Unmarshal(pub.body, &out) != nil || len(out.SHA) != 40 || !strings.HasPrefix(out.Tag, "publish/serial/") {
		t.Fatalf("publish: %v", pub)
	}
	n := s.sixIn(t, out.SHA)
	if n != 0 && n != len(s.files) {
		t.Fatalf("the published commit %s holds %d of the six files", out.SHA, n)
	}
	t.Logf("serial order: the published commit holds %d of the six files (the turn's commit: %v)", n, out.SHA == turnSHA)
	if got := s.git(t, "rev-parse", out.Tag+"^{commit}"); got != out.SHA {
		t.Fatalf("tag %s names %s, want %s", out.Tag, got, out.SHA)
	}
}
