package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/svc-dev/svc/podagent/internal/agentloop/fakegateway"
	fsstore "github.com/svc-dev/svc/shared/objstore/fs"
	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/wire"
)

// A full workspace disk is an error an operator can act on: on
// a small tmpfs filled to the last byte, a flush answers 507
// insufficient_storage naming the workspace (not 500 "Internal error."),
// and once space is freed the next flush commits what was pending. The
// test mounts the tmpfs itself (it runs as root, like the harness's
// PostgreSQL start).
func TestFullWorkspaceDiskAnswers507(t *testing.T) {
	t.Parallel()
	ws := tmpfsWorkspace(t)
	e := newEnv(t, "fs")
	e.ws = ws
	p := e.start("SVC_WORKSPACE_DIR=" + ws)
	e.write("a.txt", "a\n")
	if code, body := p.flush(t, `{}`); code != 200 {
		t.Fatalf("first flush: %d %s", code, body)
	}
	e.write("b.txt", "pending\n")
	filler := filepath.Join(ws, "filler.bin")
	fill(t, filler)

	code, body := p.flush(t, `{}`)
	var eb wire.ErrorBody
	_ = json.Unmarshal([]byte(body), &eb)
	if code != 507 || eb.Error.Code != "insufficient_storage" || eb.Error.Type != "server_error" ||
		!strings.Contains(eb.Error.Message, "SVC_WORKSPACE_DIR") {
		t.Fatalf("flush on a full disk: %d %s, want 507 insufficient_storage naming SVC_WORKSPACE_DIR", code, body)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if code, body := p.flush(t, `{}`); code != 200 {
		t.Fatalf("flush after freeing space: %d %s", code, body)
	}
	e.requireCommitted("b.txt", "pending\n")
}

// A sync webhook caller is told of a full workspace disk too:
// the agent's write_file on a filled 8 MB tmpfs ends the turn, and the
// reply is 507 insufficient_storage naming SVC_WORKSPACE_DIR (not 502
// with the model carrying on). Once space is freed, the next message's
// turn is committed and persisted before its 200.
func TestFullWorkspaceDiskAnswers507ToSyncWebhook(t *testing.T) {
	t.Parallel()
	testenv.RequireTool(t, "git")
	ws := tmpfsWorkspace(t)
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("disk-full-signing-key-32-bytes!!"))
	gw := fakegateway.New(t, "p1", token)
	gw.SetChannel(wire.ChannelConfig{Configured: true, ChannelID: "ch_1", Secret: secret}, 0)
	// The model writes <message>.txt, then answers once the tool ran.
	gw.Script(func(r fakegateway.Request) fakegateway.Reply {
		msg := ""
		for _, m := range r.Messages() {
			if m["role"] == "tool" {
				return fakegateway.Reply{Text: "wrote " + msg}
			}
			if c, _ := m["content"].(string); m["role"] == "user" {
				msg = c
			}
		}
		return fakegateway.Reply{ToolCalls: []fakegateway.ToolCall{{ID: "w", Name: "write_file",
			Arguments: fmt.Sprintf(`{"path":"%s.txt","content":"%s\n"}`, msg, msg)}}}
	})
	data := t.TempDir()
	store, err := fsstore.New(filepath.Join(data, "store"), fsstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ws: ws, hooks: t.TempDir(), logFile: filepath.Join(t.TempDir(), "podagent.log"), store: store}
	e.vars = []string{"SVC_PROJECT_ID=p1", "SVC_RUNTIME_TOKEN=" + token, "SVC_API_URL=" + gw.URL,
		"SVC_WORKSPACE_DIR=" + ws, "SVC_DATA_DIR=" + data, "SVC_STORAGE=fs", "SVC_LFS=false",
		"SVC_CHANNEL_CONFIG_TTL=1h", "PATH=" + os.Getenv("PATH")}
	p := e.start()
	send := func(msg string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+p.addr+"/agent/channels/webhook/incoming",
			strings.NewReader(fmt.Sprintf(`{"message":%q}`, msg)))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set(wire.HeaderWebhookSecret, secret)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("webhook %s: %v\n%s", msg, err, e.logs())
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}

	filler := filepath.Join(ws, "filler.bin")
	fill(t, filler)
	code, body := send("first")
	var eb wire.ErrorBody
	_ = json.Unmarshal([]byte(body), &eb)
	if code != 507 || eb.Error.Code != "insufficient_storage" || eb.Error.Type != "server_error" ||
		!strings.Contains(eb.Error.Message, "SVC_WORKSPACE_DIR") {
		t.Fatalf("sync webhook on a full disk: %d %s, want 507 insufficient_storage naming SVC_WORKSPACE_DIR\n%s",
			code, body, e.logs())
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if code, body := send("second"); code != 200 || !strings.Contains(body, "wrote second") {
		t.Fatalf("sync webhook after freeing space: %d %s\n%s", code, body, e.logs())
	}
	e.requireCommitted("second.txt", "second\n")
	local, err := exec.Command("git", "-C", ws, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	if durable, _ := e.durableHead(); durable != strings.TrimSpace(string(local)) {
		t.Fatalf("the second turn's commit %s is not the durable main %s", local, durable)
	}
}

// tmpfsWorkspace mounts an 8 MB tmpfs as a workspace (the test runs as
// root, like the harness's PostgreSQL start); it is unmounted with the test.
func tmpfsWorkspace(t *testing.T) string {
	t.Helper()
	ws := filepath.Join(t.TempDir(), "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", ws, "tmpfs", 0, "size=8m,mode=0755"); err != nil {
		t.Fatalf("mounting a tmpfs (the test needs root, as make test has): %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(ws, unix.MNT_DETACH) })
	return ws
}

// fill writes path until the disk is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the disk: %v", err)
			}
			break
		}
	}
	// The last partial blocks too.
	for _, n := range []int{4096, 512, 1} {
		for {
			if _, err := f.Write(buf[:n]); err != nil {
				break
			}
		}
	}
}
