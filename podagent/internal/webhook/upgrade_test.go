package webhook_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/podagent/internal/agentloop/fakegateway"
	"github.com/svc-dev/svc/podagent/internal/checkpoints"
	"github.com/svc-dev/svc/podagent/internal/config"
	"github.com/svc-dev/svc/podagent/internal/inbox"
	"github.com/svc-dev/svc/podagent/internal/journal"
	"github.com/svc-dev/svc/podagent/internal/pod"
	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/wire"
)

// legacyName is the file name the JSON journals of earlier pods gave an
// entry: the first 16 bytes of the correlationId's SHA-256, in hex.
func legacyName(corr string) string {
	sum := sha256.Sum256([]byte(corr))
	return hex.EncodeToString(sum[:16]) + ".json"
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A pod upgraded on the same volume keeps every promise the earlier pod's
// JSON journals held (.git/svc-agent/{inbox,outbox,checkpoints.json}): the
// accepted message's turn runs and its reply is called back, the replied
// message's journaled reply is called back without a turn, the outbox
// message reaches the API, the commit is recorded, messageCount and the
// activity window carry on; the JSON journals are gone, imported into the
// journal file.
func TestUpgradeKeepsThePromisesOfTheJSONJournals(t *testing.T) {
	t.Parallel()
	testenv.RequireTool(t, "git")
	const project, token = "prj_up", "svc_rt_prj_up.test"
	gw := fakegateway.New(t, project, token)
	gw.SetChannel(wire.ChannelConfig{Configured: true, ChannelID: "ch_1", Secret: "sec"}, 0)
	gw.Sequence(fakegateway.Reply{Text: "answer of the resumed turn"})

	var mu sync.Mutex
	callbacks := map[string]string{} // correlationId → reply
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var cb wire.WebhookCallback
		body, _ := io.ReadAll(r.Body)
		if json.Unmarshal(body, &cb) == nil {
			mu.Lock()
			callbacks[cb.CorrelationID] = cb.Reply
			mu.Unlock()
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer recv.Close()

	dir := t.TempDir()
	env := map[string]string{"SVC_PROJECT_ID": project, "SVC_RUNTIME_TOKEN": token, "SVC_API_URL": gw.URL,
		"SVC_DATA_DIR": filepath.Join(dir, "data"), "SVC_WORKSPACE_DIR": filepath.Join(dir, "ws"), "SVC_LFS": "false",
		"SVC_CALLBACK_ALLOWED_NETS": "127.0.0.0/8"}
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
	// The volume of an earlier pod: a repository, and JSON journals.
	p, err := pod.Start(ctx, pod.Options{Config: cfg, Store: store, Log: log, Webhook: cfg.Webhook})
	if err != nil {
		t.Fatal(err)
	}
	p.Shutdown(ctx)
	state := filepath.Join(cfg.WorkspaceDir, ".git", "svc-agent")
	if err := os.Remove(filepath.Join(state, journal.FileName)); err != nil {
		t.Fatal(err)
	}
	head, err := exec.Command("git", "-C", cfg.WorkspaceDir, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	sha := strings.TrimSpace(string(head))
	t0 := time.Now().UTC().Add(-time.Minute)
	in := func(msg string) wire.WebhookIncoming {
		return wire.WebhookIncoming{Message: msg, CallbackURL: recv.URL, Metadata: json.RawMessage(`{}`)}
	}
	writeJSON(t, filepath.Join(state, "inbox", legacyName("cor_accepted")), inbox.Entry{CorrelationID: "cor_accepted",
		ChannelID: "ch_1", WebhookIncoming: in("answer me"), AcceptedAt: t0, State: inbox.StateAccepted})
	writeJSON(t, filepath.Join(state, "inbox", legacyName("cor_replied")), inbox.Entry{CorrelationID: "cor_replied",
		ChannelID: "ch_1", WebhookIncoming: in("answered before the upgrade"), AcceptedAt: t0, State: inbox.StateReplied,
		Runs: 1, Reply: "reply journaled by the earlier pod", RepliedAt: t0})
	writeJSON(t, filepath.Join(state, "inbox", "counters.state"), inbox.Counters{MessageCount: 41})
	writeJSON(t, filepath.Join(state, "inbox", "activity.state"), []wire.ActivityEvent{{ID: "act_old",
		Direction: wire.DirectionInbound, Preview: "before the upgrade", Status: wire.ActivityReplied, CreatedAt: t0}})
	writeJSON(t, filepath.Join(state, "outbox", legacyName("cor_outbox")), wire.OutboxPut{ChannelID: "ch_1",
		OutboxReply: wire.OutboxReply{CorrelationID: "cor_outbox", Reply: "late reply", CreatedAt: t0}})
	writeJSON(t, filepath.Join(state, "checkpoints.json"), []checkpoints.Entry{{
		Record: wire.CheckpointRecord{CommitSHA: sha, CommitSummary: wire.CommitSummary{Message: "before the upgrade"}}, Persisted: true}})
	recordsBefore := len(gw.Records())

	// The upgraded pod.
	p2, err := pod.Start(ctx, pod.Options{Config: cfg, Store: store, Log: log, Webhook: cfg.Webhook})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Shutdown(ctx)
	for _, gone := range []string{"inbox", "outbox", "checkpoints.json"} {
		if _, err := os.Stat(filepath.Join(state, gone)); !os.IsNotExist(err) {
			t.Errorf("%s is still there after the import: %v", gone, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		done := callbacks["cor_accepted"] != "" && callbacks["cor_replied"] != ""
		mu.Unlock()
		_, outboxed := gw.Outbox()["cor_outbox"]
		recorded := false
		for _, r := range gw.Records()[recordsBefore:] {
			recorded = recorded || (r.CommitSHA == sha && r.Message == "before the upgrade")
		}
		if done && outboxed && recorded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s: callbacks %v, outbox %v, recorded %v", callbacks, outboxed, recorded)
		}
		time.Sleep(20 * time.Millisecond) // observe the pod's background work: poll with a deadline
	}
	mu.Lock()
	if callbacks["cor_accepted"] != "answer of the resumed turn" || callbacks["cor_replied"] != "reply journaled by the earlier pod" {
		t.Errorf("callbacks %v", callbacks)
	}
	mu.Unlock()

	srv := httptest.NewServer(p2.Echo)
	defer srv.Close()
	get := func(path string, v any) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("X-Webhook-Secret", "sec")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if err := json.NewDecoder(res.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
	var health wire.WebhookHealth
	get("/agent/channels/webhook/health", &health)
	if health.MessageCount != 41 {
		t.Errorf("messageCount %d, want the earlier pod's 41", health.MessageCount)
	}
	var act wire.WebhookActivity
	get("/agent/channels/webhook/activity", &act)
	found := false
	for _, e := range act.Events {
		found = found || e.ID == "act_old"
	}
	if !found {
		t.Errorf("the earlier pod's activity is gone: %+v", act)
	}
}
