package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/podagent/internal/agentloop/fakegateway"
	"github.com/svc-dev/svc/podagent/internal/config"
	"github.com/svc-dev/svc/podagent/internal/pod"
	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/wire"
)

// A real pod (git_only, fs store) behind the route: the turn's files end in
// one commit, the .git is persisted and one checkpoint row is recorded.
func TestPodWebhookTurnCommitsPersistsRecords(t *testing.T) {
	t.Parallel()
	testenv.RequireTool(t, "git")
	const project, token = "prj_wh", "svc_rt_prj_wh.test"
	gw := fakegateway.New(t, project, token)
	gw.SetChannel(wire.ChannelConfig{Configured: true, ChannelID: "ch_1", Secret: "sec"}, 0)
	gw.Sequence(
		fakegateway.Reply{ToolCalls: []fakegateway.ToolCall{
			{ID: "1", Name: "write_file", Arguments: `{"path":"docs/hello.md","content":"# hello\n"}`},
			{ID: "2", Name: "write_file", Arguments: `{"path":"main.go","content":"package main\n"}`},
		}},
		fakegateway.Reply{Text: "Wrote two files."},
	)
	dir := t.TempDir()
	env := map[string]string{"SVC_PROJECT_ID": project, "SVC_RUNTIME_TOKEN": token, "SVC_API_URL": gw.URL,
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
	defer p.Shutdown(ctx)
	srv := httptest.NewServer(p.Echo)
	defer srv.Close()
	gitOut := func(args ...string) string {
		out, err := exec.Command("git", append([]string{"-C", cfg.WorkspaceDir}, args...)...).Output()
		if err != nil {
			t.Fatalf("git %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	before := gitOut("rev-list", "--count", "HEAD")

	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/agent/channels/webhook/incoming",
		strings.NewReader(`{"message":"write the docs","senderId":"ci"}`))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("X-Webhook-Secret", "sec")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var rep wire.WebhookReply
	_ = json.Unmarshal(body, &rep)
	if res.StatusCode != 200 || rep.Reply != "Wrote two files." {
		t.Fatalf("%d %s", res.StatusCode, body)
	}
	if b, err := os.ReadFile(filepath.Join(cfg.WorkspaceDir, "docs", "hello.md")); err != nil || string(b) != "# hello\n" {
		t.Fatalf("file %q %v", b, err)
	}
	if after := gitOut("rev-list", "--count", "HEAD"); after != fmt.Sprint(atoi(t, before)+1) {
		t.Fatalf("commits before %s, after %s: want exactly one more", before, after)
	}
	head := gitOut("rev-parse", "HEAD")
	if msg := gitOut("log", "-1", "--format=%s"); msg != "webhook: write the docs" {
		t.Fatalf("commit message %q", msg)
	}
	if files := gitOut("show", "--name-only", "--format=", "HEAD"); files != "docs/hello.md\nmain.go" {
		t.Fatalf("commit files %q", files)
	}
	if status := gitOut("status", "--porcelain"); status != "" {
		t.Fatalf("uncommitted: %q", status)
	}
	rows := 0
	for _, r := range gw.Records() {
		if strings.HasPrefix(r.Message, "webhook:") {
			rows++
			if r.CommitSHA != head {
				t.Fatalf("row for %s, head %s", r.CommitSHA, head)
			}
		}
	}
	if rows != 1 {
		t.Fatalf("%d webhook checkpoint rows: %+v", rows, gw.Records())
	}
	if _, err := store.Head(ctx, project+"/repo.git.tar.gz"); err != nil {
		t.Fatalf(".git not persisted: %v", err)
	}
}

func atoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
