package agentloop_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/podagent/internal/agentloop"
	"github.com/svc-dev/svc/podagent/internal/agentloop/fakegateway"
	"github.com/svc-dev/svc/podagent/internal/turn"
)

// committer records Turn calls.
type committer struct {
	mu    sync.Mutex
	calls []string
	err   error
}

func (c *committer) Turn(_ context.Context, msg string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, msg)
	if c.err != nil {
		return "", c.err
	}
	return "0123456789abcdef0123456789abcdef01234567", nil
}

func (c *committer) Calls() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.calls...)
}

// turnAgent runs an agent's turns in package turn, which commits what
// the tools changed (the agent loop itself only talks to the model and runs
// tools): the commit assertions below hold for the whole turn.
type turnAgent struct{ r *turn.Runner }

func (a turnAgent) Run(ctx context.Context, req agentloop.Request) (agentloop.Result, error) {
	return a.r.Run(ctx, req, nil)
}

func newAgent(t *testing.T, max int) (turnAgent, *fakegateway.Server, *committer, string) {
	t.Helper()
	gw := fakegateway.New(t, "prj_1", "rt-token")
	ws := filepath.Join(t.TempDir(), "ws")
	if err := os.MkdirAll(filepath.Join(ws, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, ".git", "config"), []byte("[core]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cm := &committer{}
	a, err := agentloop.New(agentloop.Options{APIURL: gw.URL, ProjectID: "prj_1", Token: "rt-token", Workspace: ws,
		MaxIterations: max, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return turnAgent{turn.New(turn.Options{Agent: a, Committer: cm, Log: zaptest.NewLogger(t)})}, gw, cm, ws
}

func call(id, name string, args map[string]any) fakegateway.ToolCall {
	b, _ := json.Marshal(args)
	return fakegateway.ToolCall{ID: id, Name: name, Arguments: string(b)}
}

func TestToolLoopWritesFilesAndCommitsOnce(t *testing.T) {
	t.Parallel()
	a, gw, cm, ws := newAgent(t, 10)
	gw.Sequence(
		fakegateway.Reply{ToolCalls: []fakegateway.ToolCall{
			call("c1", "write_file", map[string]any{"path": "hello.txt", "content": "hello world\n"}),
			call("c2", "write_file", map[string]any{"path": "src/app/main.go", "content": "package main\n"}),
		}},
		fakegateway.Reply{ToolCalls: []fakegateway.ToolCall{
			call("c3", "list_files", map[string]any{}),
			call("c4", "read_file", map[string]any{"path": "hello.txt"}),
		}},
		fakegateway.Reply{ToolCalls: []fakegateway.ToolCall{call("c5", "delete_file", map[string]any{"path": "src/app/main.go"})}},
		fakegateway.Reply{Text: "Done: wrote hello.txt."},
	)
	meta := json.RawMessage(`{ "ticket": 42,  "tags":["a","b"], "nested": {"z":1,"a":2} }`)
	res, err := a.Run(context.Background(), agentloop.Request{Message: "create hello.txt", SenderID: "u-1",
		SenderName: "Ada", Channel: "webhook", CorrelationID: "cor_1", Metadata: meta})
	if err != nil {
		t.Fatal(err)
	}
	if res.Reply != "Done: wrote hello.txt." || res.Iterations != 4 || !res.Changed || res.CommitSHA == "" {
		t.Fatalf("result = %+v", res)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "hello.txt")); err != nil || string(b) != "hello world\n" {
		t.Fatalf("hello.txt = %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(ws, "src/app/main.go")); !os.IsNotExist(err) {
		t.Fatalf("main.go should be deleted: %v", err)
	}
	if calls := cm.Calls(); len(calls) != 1 || calls[0] != "webhook: create hello.txt" {
		t.Fatalf("commits = %q", calls)
	}

	reqs := gw.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d gateway requests", len(reqs))
	}
	first := reqs[0]
	if first.Header.Get("Authorization") != "Bearer rt-token" || first.Body["model"] != agentloop.DefaultModel {
		t.Fatalf("auth/model: %q %v", first.Header.Get("Authorization"), first.Body["model"])
	}
	tools, _ := first.Body["tools"].([]any)
	if len(tools) != 4 {
		t.Fatalf("tools = %v", first.Body["tools"])
	}
	// The metadata reaches the model's context byte for byte.
	ctxMsg, _ := first.Messages()[1]["content"].(string)
	if !strings.Contains(ctxMsg, string(meta)) || !strings.Contains(ctxMsg, `"senderId":"u-1"`) {
		t.Fatalf("context message = %s", ctxMsg)
	}
	// Tool results go back to the model with their call ids.
	last := reqs[2].Messages()
	var listing, read string
	for _, m := range last {
		switch m["tool_call_id"] {
		case "c3":
			listing, _ = m["content"].(string)
		case "c4":
			read, _ = m["content"].(string)
		}
	}
	if listing != "hello.txt\nsrc/app/main.go" || read != "hello world\n" {
		t.Fatalf("listing %q read %q", listing, read)
	}
}

func TestToolLoopRefusesPathEscapes(t *testing.T) {
	t.Parallel()
	a, gw, cm, ws := newAgent(t, 10)
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(ws, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(".git", filepath.Join(ws, "gitlink")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("s3cret"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := []fakegateway.ToolCall{
		call("e1", "write_file", map[string]any{"path": "../escape.txt", "content": "x"}),
		call("e2", "write_file", map[string]any{"path": "/tmp/abs.txt", "content": "x"}),
		call("e3", "write_file", map[string]any{"path": ".git/config", "content": "x"}),
		call("e4", "write_file", map[string]any{"path": "a/../../escape.txt", "content": "x"}),
		call("e5", "write_file", map[string]any{"path": "out/planted.txt", "content": "x"}),
		call("e6", "read_file", map[string]any{"path": "out/secret.txt"}),
		call("e7", "write_file", map[string]any{"path": "gitlink/hooks/pre-commit", "content": "x"}),
		call("e8", "delete_file", map[string]any{"path": ".git"}),
		call("e9", "read_file", map[string]any{"path": ".GIT/config"}),
		call("e10", "list_files", map[string]any{"path": "../"}),
		call("e11", "write_file", map[string]any{"path": "sub/.git/x", "content": "x"}),
		call("e12", "delete_file", map[string]any{"path": "."}),
	}
	gw.Sequence(fakegateway.Reply{ToolCalls: bad}, fakegateway.Reply{Text: "refused"})
	res, err := a.Run(context.Background(), agentloop.Request{Message: "escape"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Changed || len(cm.Calls()) != 0 {
		t.Fatalf("nothing may change: %+v, commits %q", res, cm.Calls())
	}
	msgs := gw.Requests()[1].Messages()
	n := 0
	for _, m := range msgs {
		if m["role"] != "tool" {
			continue
		}
		n++
		if c, _ := m["content"].(string); !strings.HasPrefix(c, "error: path refused") {
			t.Errorf("%v: %q", m["tool_call_id"], c)
		}
	}
	if n != len(bad) {
		t.Fatalf("%d tool results", n)
	}
	for _, p := range []string{filepath.Join(filepath.Dir(ws), "escape.txt"), filepath.Join(outside, "planted.txt"),
		filepath.Join(ws, ".git", "hooks", "pre-commit")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s was written", p)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ws, ".git", "config")); string(b) != "[core]\n" {
		t.Errorf(".git/config changed: %q", b)
	}
}

func TestToolLoopBoundedIterations(t *testing.T) {
	t.Parallel()
	a, gw, cm, _ := newAgent(t, 3)
	gw.Sequence(
		fakegateway.Reply{ToolCalls: []fakegateway.ToolCall{call("w", "write_file", map[string]any{"path": "x.txt", "content": "1"})}},
		fakegateway.Reply{ToolCalls: []fakegateway.ToolCall{call("l", "list_files", nil)}},
	)
	res, err := a.Run(context.Background(), agentloop.Request{Message: "loop forever"})
	var ae *agentloop.Error
	if !errors.As(err, &ae) || ae.Code != "max_iterations" {
		t.Fatalf("err = %v", err)
	}
	if len(gw.Requests()) != 3 || !strings.Contains(res.Reply, "max_iterations") {
		t.Fatalf("requests %d, reply %q", len(gw.Requests()), res.Reply)
	}
	// The change made before the bound is still committed.
	if len(cm.Calls()) != 1 || res.CommitSHA == "" {
		t.Fatalf("commits %q", cm.Calls())
	}
}

func TestToolLoopGatewayErrorGivesClearReply(t *testing.T) {
	t.Parallel()
	a, gw, cm, _ := newAgent(t, 3)
	gw.Sequence(fakegateway.Reply{Status: 402, Code: "usage_limit_reached"})
	res, err := a.Run(context.Background(), agentloop.Request{Message: "hi"})
	var ae *agentloop.Error
	if !errors.As(err, &ae) || ae.Code != "usage_limit_reached" || ae.Status != 402 {
		t.Fatalf("err = %#v", err)
	}
	if !strings.Contains(res.Reply, "usage_limit_reached") || len(cm.Calls()) != 0 {
		t.Fatalf("reply %q commits %q", res.Reply, cm.Calls())
	}

	// Unreachable gateway.
	gw.Close()
	_, err = a.Run(context.Background(), agentloop.Request{Message: "hi"})
	if !errors.As(err, &ae) || ae.Code != "gateway_unreachable" {
		t.Fatalf("err = %v", err)
	}
}

func TestCommitFailure(t *testing.T) {
	t.Parallel()
	a, gw, cm, _ := newAgent(t, 3)
	cm.err = errors.New("fenced")
	gw.Sequence(
		fakegateway.Reply{ToolCalls: []fakegateway.ToolCall{call("w", "write_file", map[string]any{"path": "x.txt", "content": "1"})}},
		fakegateway.Reply{Text: "ok"},
	)
	_, err := a.Run(context.Background(), agentloop.Request{Message: "write"})
	var ae *agentloop.Error
	if !errors.As(err, &ae) || ae.Code != "commit_failed" {
		t.Fatalf("err = %v", err)
	}
}

func TestOneTurnAtATime(t *testing.T) {
	t.Parallel()
	a, gw, _, _ := newAgent(t, 3)
	hold := make(chan struct{})
	arrived := make(chan struct{}, 1)
	gw.Script(func(fakegateway.Request) fakegateway.Reply {
		arrived <- struct{}{}
		return fakegateway.Reply{Text: "first", Gate: hold}
	})
	done := make(chan error, 1)
	go func() {
		_, err := a.Run(context.Background(), agentloop.Request{Message: "first"})
		done <- err
	}()
	<-arrived // the first turn holds the project
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := a.Run(ctx, agentloop.Request{Message: "second"})
	var ae *agentloop.Error
	if !errors.As(err, &ae) || ae.Code != "canceled" {
		t.Fatalf("second turn: %v", err)
	}
	if n := len(gw.Requests()); n != 1 {
		t.Fatalf("the second turn reached the gateway (%d requests)", n)
	}
	close(hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestTurnTimeoutNeverHangs(t *testing.T) {
	t.Parallel()
	a, gw, _, _ := newAgent(t, 3)
	hold := make(chan struct{})
	defer close(hold)
	arrived := make(chan struct{}, 1)
	gw.Script(func(fakegateway.Request) fakegateway.Reply {
		arrived <- struct{}{}
		return fakegateway.Reply{Gate: hold}
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-arrived; cancel() }()
	_, err := a.Run(ctx, agentloop.Request{Message: "slow"})
	var ae *agentloop.Error
	if !errors.As(err, &ae) || ae.Code != "canceled" {
		t.Fatalf("err = %v", err)
	}
}
