package e2e

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/testenv/fakeupstream"
	"github.com/svc-dev/svc/shared/wire"
)

// faultyReceiver fails 30 % of attempts (decided by a hash of the
// webhook-id and the attempt's number, so a run is reproducible), answers
// 503 to everything while down, and counts every request per webhook-id.
type faultyReceiver struct {
	*httptest.Server
	mu        sync.Mutex
	down      bool
	requests  map[string]int // by webhook-id
	delivered map[string]int // 2xx answers, by webhook-id
	corr      map[string]string
}

func newFaultyReceiver(t *testing.T) *faultyReceiver {
	r := &faultyReceiver{requests: map[string]int{}, delivered: map[string]int{}, corr: map[string]string{}}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var cb wire.WebhookCallback
		_ = json.NewDecoder(req.Body).Decode(&cb)
		id := req.Header.Get("webhook-id")
		r.mu.Lock()
		defer r.mu.Unlock()
		r.requests[id]++
		r.corr[id] = cb.CorrelationID
		h := fnv.New32a()
		fmt.Fprintf(h, "%s/%d", id, r.requests[id])
		if r.down || h.Sum32()%10 < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		r.delivered[id]++
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.Server.Close)
	return r
}

func (r *faultyReceiver) setDown(down bool) {
	r.mu.Lock()
	r.down = down
	r.mu.Unlock()
}

// Load and faults through real processes: two API replicas on one
// PostgreSQL, the local driver's podagents, async messages over several
// projects against a receiver that fails 30 % of attempts and is down for
// a stretch; midway the pods are stopped (SIGTERM, as the idle reaper
// stops them) and one replica is killed with SIGKILL. Every message is
// delivered at least once or in the outbox, every request of a message
// carries its one webhook-id, and the attempt log has a row for every
// request the receiver saw but those the killed replica had in flight
// (at most its queue concurrency: the API records an attempt after it).
//
// CI size: 24 messages over 3 projects. The big run
// (SVC_BENCH_WEBHOOK_MESSAGES=10000 SVC_BENCH_WEBHOOK_PROJECTS=100) logs the
// delivery rate.
func TestWebhookLoadFaultsRealProcesses(t *testing.T) {
	t.Parallel()
	messages := envInt("SVC_BENCH_WEBHOOK_MESSAGES", 24)
	projects := envInt("SVC_BENCH_WEBHOOK_PROJECTS", 3)
	const concurrency = 4
	common := []string{"SVC_CALLBACK_ALLOWED_NETS=127.0.0.0/8", "SVC_POD_CALLBACK_RETRY_BASE=200ms",
		"SVC_POD_CALLBACK_RETRY_MAX=1s", "SVC_POD_CALLBACK_MAX_ATTEMPTS=3",
		"SVC_WEBHOOK_RETRY_SCHEDULE=500ms,1s,1s,2s,2s,3s,3s,3s,3s,3s",
		"SVC_WEBHOOK_QUEUE_CONCURRENCY=" + strconv.Itoa(concurrency)}
	w := newProxyWorld(t, podagentBin(t), common...)
	t.Cleanup(func() { podLogOnFailure(t, w) })
	// Replica B shares the database (its own data dir): it delivers from
	// the queue beside A and is the one killed.
	b := w.e.startAPI(append([]string{"SVC_PODAGENT_BIN=" + podagentBin(t), "SVC_DATA_DIR=" + t.TempDir(),
		"SVC_RUNTIME_STOP_GRACE=10s"}, common...)...)
	recv := newFaultyReceiver(t)
	w.e.upstream.Script(func(fakeupstream.Request) fakeupstream.Reply {
		return fakeupstream.Reply{Text: "done", PromptTokens: 5, CompletionTokens: 1}
	})

	type proj struct{ id, channel string }
	ps := []proj{{w.project, ""}}
	for i := 1; i < projects; i++ {
		ps = append(ps, proj{w.e.admin("project", "create", "--workspace", w.acc.workspace, "--name", fmt.Sprintf("load%d", i))["id"].(string), ""})
	}
	for i := range ps {
		ps[i].channel = w.e.admin("channel", "set", "--project", ps[i].id, "--secret", "hook-secret")["channelId"].(string)
	}

	xactBefore := dbTransactions(t, w.e.dbURL)
	start := time.Now()
	var mu sync.Mutex
	accepted := map[string]string{} // correlationId → project
	send := func(n int) {
		p := ps[n%len(ps)]
		res, body := proxyDo(t, w.api.URL, p.id, w.acc.key, http.MethodPost, "/agent/channels/webhook/incoming",
			[]byte(fmt.Sprintf(`{"message":"m%d","callbackUrl":"%s/cb"}`, n, recv.URL)), hookHeaders())
		var acc wire.WebhookAccepted
		if res.StatusCode == http.StatusAccepted && json.Unmarshal(body, &acc) == nil {
			mu.Lock()
			accepted[acc.CorrelationID] = p.id
			mu.Unlock()
		}
	}
	sendRange := func(from, to int) {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 8)
		for n := from; n < to; n++ {
			wg.Add(1)
			sem <- struct{}{}
			go func() { defer func() { <-sem; wg.Done() }(); send(n) }()
		}
		wg.Wait()
	}
	half := messages / 2
	sendRange(0, half)
	// Midway: the receiver goes down, the pods are stopped as the idle
	// reaper stops them (their retries go to the API's queue), and B dies
	// with SIGKILL while it delivers.
	recv.setDown(true)
	pods := childPIDs(t, w.api.cmd.Process.Pid)
	if len(pods) == 0 {
		t.Fatal("no podagent runs midway")
	}
	for _, pid := range pods {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		waitGone(t, pid)
	}
	sendRange(half, messages)
	time.Sleep(time.Second) // the receiver's down stretch (a fault injected for a while, not synchronisation)
	must(t, b.cmd.Process.Signal(syscall.SIGKILL))
	_, _ = b.cmd.Process.Wait()
	recv.setDown(false)

	mu.Lock()
	want := len(accepted)
	mu.Unlock()
	if want < messages*9/10 {
		t.Fatalf("only %d of %d messages accepted", want, messages)
	}
	// Every message is delivered, or ends in the outbox.
	outboxed := map[string]bool{}
	// A row the killed replica held is claimed again once its lease ran
	// out (the attempt timeout + 30 s).
	deadline := time.Now().Add(time.Duration(100+messages/20) * time.Second)
	for {
		missing := 0
		recv.mu.Lock()
		for corr := range accepted {
			if recv.delivered["msg_"+corr[len("cor_"):]] == 0 && !outboxed[corr] {
				missing++
			}
		}
		recv.mu.Unlock()
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			// What the queue gave up on waits in the outbox.
			for _, p := range ps {
				res, body := proxyDo(t, w.api.URL, p.id, w.acc.key, http.MethodGet, "/agent/channels/webhook/outbox/"+p.channel+"?limit=100", nil, hookHeaders())
				var ob wire.OutboxResponse
				if res.StatusCode == 200 && json.Unmarshal(body, &ob) == nil {
					for _, m := range ob.Messages {
						outboxed[m.CorrelationID] = true
					}
				}
			}
			if deadline.Add(5 * time.Second).Before(time.Now()) {
				t.Fatalf("%d of %d messages neither delivered nor in the outbox", missing, want)
			}
		}
		time.Sleep(100 * time.Millisecond) // poll with a deadline
	}
	elapsed := time.Since(start)
	xacts := dbTransactions(t, w.e.dbURL) - xactBefore

	// The attempt log against the receiver.
	recv.mu.Lock()
	defer recv.mu.Unlock()
	logged, seen := 0, 0
	for corr, project := range accepted {
		id := "msg_" + corr[len("cor_"):]
		res, body := proxyDo(t, w.api.URL, project, w.acc.key, http.MethodGet,
			"/agent/channels/webhook/attempts?limit=200&correlationId="+corr, nil, hookHeaders())
		var l wire.WebhookAttemptList
		if res.StatusCode != http.StatusOK || json.Unmarshal(body, &l) != nil {
			t.Fatalf("attempts of %s: %d %s", corr, res.StatusCode, body)
		}
		for _, a := range l.Attempts {
			if a.WebhookID != id {
				t.Fatalf("%s: an attempt with webhook-id %s, want %s", corr, a.WebhookID, id)
			}
		}
		if len(l.Attempts) > recv.requests[id] {
			t.Fatalf("%s: %d attempts in the log, the receiver saw %d", corr, len(l.Attempts), recv.requests[id])
		}
		logged += len(l.Attempts)
		seen += recv.requests[id]
	}
	for id, corr := range recv.corr {
		if _, ok := accepted[corr]; !ok || id != "msg_"+corr[len("cor_"):] {
			t.Fatalf("the receiver got %s for %s: not an accepted message's webhook-id", id, corr)
		}
	}
	if seen <= want {
		t.Fatalf("the receiver saw %d requests for %d messages: its failures did not show", seen, want)
	}
	if lost := seen - logged; lost < 0 || lost > concurrency {
		t.Fatalf("the receiver saw %d requests, the log has %d: more than the killed replica's %d in flight", seen, logged, concurrency)
	}
	t.Logf("%d messages over %d projects: %d requests, %d logged (%d lost with the SIGKILL), %d outboxed, %.1f messages/s end to end; "+
		"%.1f database transactions per attempt (every process's, turns and pods included)",
		want, len(ps), seen, logged, seen-logged, len(outboxed), float64(want)/elapsed.Seconds(), float64(xacts)/float64(seen))
}

// dbTransactions is the database's committed and rolled back transactions
// so far (pg_stat_database: every statement outside a transaction is one;
// the statistics lag the backends by up to a second).
func dbTransactions(t *testing.T, url string) int64 {
	t.Helper()
	db, err := sql.Open("pgx", url)
	must(t, err)
	defer db.Close()
	var n int64
	must(t, db.QueryRow(`SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&n))
	return n
}
