package e2e

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/wire"
)

// A pod stopped with SIGTERM while a callback is in its retry schedule
// (the idle reaper, a replacement) hands the reply to the API: the API's
// delivery queue continues it once the receiver recovers, with the pod's
// webhook-id, and a pod started later does not deliver it again. The
// attempt log counts exactly what the receiver saw.
func TestWebhookPodStoppedMidScheduleHandsRetriesToTheAPI(t *testing.T) {
	t.Parallel()
	// The pod's second attempt would come after ten minutes: it is
	// mid-schedule when stopped. The API retries every second.
	w, _ := webhookWorld(t, "SVC_POD_CALLBACK_RETRY_BASE=10m", "SVC_POD_CALLBACK_RETRY_MAX=10m",
		"SVC_WEBHOOK_RETRY_SCHEDULE=1s,1s,1s,1s,1s")
	t.Cleanup(func() { podLogOnFailure(t, w) })
	var mu sync.Mutex
	failing := true
	ids := map[string][]string{} // webhook-ids of every attempt, by correlationId
	firstAttempt := make(chan struct{}, 1)
	delivered := make(chan string, 4)
	recv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var cb wire.WebhookCallback
		_ = json.NewDecoder(r.Body).Decode(&cb)
		mu.Lock()
		ids[cb.CorrelationID] = append(ids[cb.CorrelationID], r.Header.Get("webhook-id"))
		fail := failing
		mu.Unlock()
		if fail {
			select {
			case firstAttempt <- struct{}{}:
			default:
			}
			rw.WriteHeader(http.StatusServiceUnavailable)
			return
		}
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
	await(t, firstAttempt, "the pod's first attempt never came")
	pods := childPIDs(t, w.api.cmd.Process.Pid)
	if len(pods) != 1 {
		t.Fatalf("API server children %v, want its one podagent", pods)
	}
	must(t, syscall.Kill(pods[0], syscall.SIGTERM))
	waitGone(t, pods[0])
	mu.Lock()
	failing = false // the receiver recovers
	mu.Unlock()

	if got := await(t, delivered, "the API never delivered the handed-over reply"); got != first {
		t.Fatalf("delivered %s, want %s", got, first)
	}

	// A pod started later (a new message) delivers its own message only.
	w.e.upstream.Script(agentScript("two.txt", "2", "second done", nil))
	second := send("second")
	if got := await(t, delivered, "the second callback never came"); got != second {
		t.Fatalf("delivered %s, want %s (the first again?)", got, second)
	}

	mu.Lock()
	got := append([]string(nil), ids[first]...)
	mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("receiver saw %d attempts of %s (%v), want 2: the pod's failed one and the API's", len(got), first, got)
	}
	for _, id := range got {
		if id != "msg_"+first[len("cor_"):] {
			t.Fatalf("webhook-ids of %s: %v, want every one msg_…", first, got)
		}
	}
	// The attempt log holds exactly the receiver's count, the pod's
	// attempt and the API's.
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, body := w.do(t, http.MethodGet, "/agent/channels/webhook/attempts?correlationId="+first, nil, hookHeaders())
		var l wire.WebhookAttemptList
		if res.StatusCode != http.StatusOK || json.Unmarshal(body, &l) != nil {
			t.Fatalf("attempts: %d %s", res.StatusCode, body)
		}
		if len(l.Attempts) == len(got) {
			for _, a := range l.Attempts {
				if a.WebhookID != got[0] {
					t.Fatalf("attempt log webhook-ids: %s", body)
				}
			}
			if l.Attempts[0].Outcome != wire.AttemptDelivered || l.Attempts[0].MessageState != wire.MessageDelivered {
				t.Fatalf("the newest attempt: %s", body)
			}
			break
		}
		if len(l.Attempts) > len(got) || time.Now().After(deadline) {
			t.Fatalf("attempt log of %s: %d rows, receiver saw %d: %s", first, len(l.Attempts), len(got), body)
		}
		time.Sleep(50 * time.Millisecond) // poll with a deadline: the pod's records arrive on their own loop
	}
}

// waitGone waits until pid has exited (it is the API server's child: the
// API reaps it).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("podagent %d did not exit after SIGTERM", pid)
		}
		time.Sleep(20 * time.Millisecond) // poll with a deadline
	}
}

// podLogOnFailure logs the project's podagent log when t failed.
func podLogOnFailure(t *testing.T, w *proxyWorld) {
	if !t.Failed() {
		return
	}
	files, _ := filepath.Glob(filepath.Join(w.dataDir, "runtimes", "*", "podagent.log"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		t.Logf("%s:\n%s", f, b)
	}
}
