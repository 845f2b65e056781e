package e2e

import (
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/svc-dev/svc/shared/wire"
)

// childPIDs lists the processes pid started (its podagents).
func childPIDs(t *testing.T, pid int) []int {
	t.Helper()
	tasks, err := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	must(t, err)
	var out []int
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(s); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// When the pod's disk is gone, the API records every
// async message its agent accepted. A message delivered by callback closes
// its record (the pod's notice); one whose pod died with its disk mid-turn
// comes out of the outbox after the answer deadline with status
// unanswered, never silently lost.
func TestWebhookAcceptedMessageOutlivesLostDisk(t *testing.T) {
	t.Parallel()
	w, channelID := webhookWorld(t, "SVC_WEBHOOK_ANSWER_DEADLINE=3s")
	delivered := make(chan string, 4)
	recv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var cb wire.WebhookCallback
		_ = json.NewDecoder(r.Body).Decode(&cb)
		delivered <- cb.CorrelationID
	}))
	defer recv.Close()
	send := func(msg string) string {
		t.Helper()
		res, body := w.do(t, http.MethodPost, "/agent/channels/webhook/incoming",
			[]byte(`{"message":"`+msg+`","callbackUrl":"`+recv.URL+`/cb"}`), hookHeaders())
		var acc wire.WebhookAccepted
		if res.StatusCode != http.StatusAccepted || json.Unmarshal(body, &acc) != nil || acc.CorrelationID == "" {
			t.Fatalf("incoming: %d %s", res.StatusCode, body)
		}
		return acc.CorrelationID
	}

	w.e.upstream.Script(agentScript("one.txt", "1", "first done", nil))
	first := send("first")
	if got := await(t, delivered, "the first callback never came"); got != first {
		t.Fatalf("delivered %s, want %s", got, first)
	}

	// The pod's notice of that delivery reaches the API after the callback
	// (relayed from its journal): wait for it, so that the kill below
	// cannot land between the two (the record would then stay open, and
	// come out unanswered, as it must when the notice is lost).
	db, err := sql.Open("pgx", w.e.dbURL)
	must(t, err)
	defer db.Close()
	noticeBy := time.Now().Add(30 * time.Second)
	for {
		var n int
		err := db.QueryRow(`SELECT count(*) FROM webhook_outbox WHERE correlation_id = $1 AND status = 'delivered'`, first).Scan(&n)
		must(t, err)
		if n == 1 {
			break
		}
		if time.Now().After(noticeBy) {
			t.Fatal("the pod's notice of the first delivery never reached the API")
		}
		time.Sleep(20 * time.Millisecond) // poll with a deadline
	}

	gate := make(chan struct{})
	defer close(gate)
	w.e.upstream.Script(agentScript("two.txt", "2", "never said", gate))
	second := send("second")
	deadline := time.Now().Add(30 * time.Second)
	for len(w.e.upstream.Requests()) < 4 { // the second turn waits for its final answer
		if time.Now().After(deadline) {
			t.Fatal("the second turn did not reach the model")
		}
		time.Sleep(20 * time.Millisecond) // poll with a deadline
	}
	pods := childPIDs(t, w.api.cmd.Process.Pid)
	if len(pods) != 1 {
		t.Fatalf("API server children %v, want its one podagent", pods)
	}
	must(t, syscall.Kill(pods[0], syscall.SIGKILL))
	must(t, os.RemoveAll(filepath.Join(w.dataDir, "runtimes", w.project)))

	res, body := w.do(t, http.MethodGet, "/agent/channels/webhook/outbox/"+channelID+"?wait=20", nil, hookHeaders())
	var ob wire.OutboxResponse
	if res.StatusCode != 200 || json.Unmarshal(body, &ob) != nil {
		t.Fatalf("outbox: %d %s", res.StatusCode, body)
	}
	if len(ob.Messages) != 1 || ob.Messages[0].CorrelationID != second || ob.Messages[0].Status != wire.OutboxStatusUnanswered ||
		ob.Messages[0].Reply != "" {
		t.Fatalf("outbox after the deadline: %s (want only %s, unanswered; %s was delivered)", body, second, first)
	}
	res, body = w.do(t, http.MethodGet, "/agent/channels/webhook/outbox/"+channelID, nil, hookHeaders())
	if res.StatusCode != 200 || string(body) != "{\"messages\":[]}\n" {
		t.Fatalf("acknowledged: %d %s", res.StatusCode, body)
	}
}

// Channel secrets are generated in the Standard Webhooks
// form (whsec_ + base64 of 32 bytes), by default for a new channel and with
// --generate-secret; a receiver verifies the callbacks with an unmodified
// Standard Webhooks library, which base64-decodes the secret after the
// prefix.
func TestWebhookGeneratedSecretVerifiesWithStandardWebhooks(t *testing.T) {
	w := newProxyWorld(t, podagentBin(t), "SVC_CALLBACK_ALLOWED_NETS=127.0.0.0/8")
	first := w.e.admin("channel", "set", "--project", w.project)
	secret, _ := first["secret"].(string)
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if !strings.HasPrefix(secret, "whsec_") || err != nil || len(key) != 32 {
		t.Fatalf("default secret of a new channel: %v", first)
	}
	if again := w.e.admin("channel", "set", "--project", w.project, "--callback-headers", `{"X-A":"b"}`); again["secret"] != nil {
		t.Fatalf("a channel with a secret keeps it: %v", again)
	}
	rotated := w.e.admin("channel", "set", "--project", w.project, "--generate-secret")
	secret, _ = rotated["secret"].(string)
	if !strings.HasPrefix(secret, "whsec_") || secret == first["secret"] {
		t.Fatalf("rotated secret: %v", rotated)
	}
	w.e.upstream.Script(agentScript("s.txt", "s", "signed", nil))
	got := make(chan error, 1)
	recv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		wh, err := standardwebhooks.NewWebhook(secret)
		if err == nil {
			err = wh.Verify(body, r.Header)
		}
		got <- err
	}))
	defer recv.Close()
	h := http.Header{"X-Webhook-Secret": {secret}, "Content-Type": {"application/json"}}
	res, body := w.do(t, http.MethodPost, "/agent/channels/webhook/incoming",
		[]byte(`{"message":"sign it","callbackUrl":"`+recv.URL+`/cb"}`), h)
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("incoming: %d %s", res.StatusCode, body)
	}
	if err := await(t, got, "no callback"); err != nil {
		t.Fatalf("Standard Webhooks verification: %v", err)
	}
}
