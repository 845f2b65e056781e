package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/podagent/internal/attemptlog"
	"github.com/svc-dev/svc/podagent/internal/journal"
	"github.com/svc-dev/svc/podagent/internal/outbox"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/wire"
)

// The webhook delivery load test (docs/webhook-delivery.md): n async
// messages to a receiver that fails 30 % of attempts at random (seeded); afterwards every
// message is delivered or in the outbox exactly as the attempt log says,
// and the receiver saw no webhook-id more often than the log's attempts.
// 100 messages run in the suite; BenchmarkAttemptLogLoad runs 1,000.

// flakyReceiver answers 503 to 30 % of requests (seeded) and counts the
// requests and the successes per webhook-id.
type flakyReceiver struct {
	*httptest.Server
	mu        sync.Mutex
	rnd       *rand.Rand
	requests  map[string]int
	delivered map[string]int
}

func newFlakyReceiver(t testing.TB, seed uint64) *flakyReceiver {
	f := &flakyReceiver{rnd: rand.New(rand.NewPCG(seed, seed)), requests: map[string]int{}, delivered: map[string]int{}}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("webhook-id")
		f.mu.Lock()
		fail := f.rnd.Float64() < 0.3
		f.requests[id]++
		if !fail {
			f.delivered[id]++
		}
		f.mu.Unlock()
		if fail {
			http.Error(w, "flaky: try again", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(f.Close)
	return f
}

// logAPI is the API's POST /internal/projects/{id}/webhook/attempts for
// this test: it keeps each attempt id once and times its handling.
type logAPI struct {
	*httptest.Server
	mu       sync.Mutex
	attempts map[string]wire.WebhookAttempt
	posts    int
	busy     time.Duration
}

func newLogAPI(t testing.TB) *logAPI {
	l := &logAPI{attempts: map[string]wire.WebhookAttempt{}}
	l.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		var in wire.WebhookAttemptsPut
		if r.URL.Path != "/internal/projects/prj_load"+internalapi.PathWebhookAttempts || json.NewDecoder(r.Body).Decode(&in) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		l.mu.Lock()
		n := 0
		for _, a := range in.Attempts {
			if _, ok := l.attempts[a.ID]; !ok {
				l.attempts[a.ID] = a
				n++
			}
		}
		l.posts++
		l.busy += time.Since(start)
		l.mu.Unlock()
		_ = json.NewEncoder(w).Encode(wire.WebhookAttemptsPutResponse{Stored: n})
	}))
	t.Cleanup(l.Close)
	return l
}

// loadResult is what runLoad measured.
type loadResult struct {
	messages, attempts, delivered, outboxed int
	posts                                   int
	recordCost                              time.Duration // per attempt, in the deliverer's path
	postCost                                time.Duration // per attempt, the log API's handling, amortised
	elapsed                                 time.Duration
}

// timedRecorder measures Record, the cost a delivery pays for the log.
type timedRecorder struct {
	*attemptlog.Recorder
	mu     sync.Mutex
	n      int
	spent  time.Duration
	finals int           // delivered or failed: a delivery's last record
	ended  chan struct{} // a final record came
}

func (r *timedRecorder) Record(a wire.WebhookAttempt) {
	start := time.Now()
	r.Recorder.Record(a)
	d := time.Since(start)
	r.mu.Lock()
	r.n++
	r.spent += d
	if a.Outcome != wire.AttemptRetrying {
		r.finals++
	}
	r.mu.Unlock()
	select {
	case r.ended <- struct{}{}:
	default:
	}
}

// waitFinals waits until n deliveries recorded their last attempt.
func (r *timedRecorder) waitFinals(ctx context.Context, n int) error {
	for {
		r.mu.Lock()
		done := r.finals >= n
		r.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-r.ended:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func runLoad(t testing.TB, n, tries int, seed uint64) loadResult {
	start := time.Now()
	rcv := newFlakyReceiver(t, seed)
	api := newLogAPI(t)
	db, err := journal.OpenState(t.TempDir(), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	log, err := attemptlog.New(attemptlog.Options{Log: logger(t), Journal: db,
		Poster: &internalapi.Client{BaseURL: api.URL, ProjectID: "prj_load", Token: "rt"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close(context.Background()) }) // before the journal closes
	rec := &timedRecorder{Recorder: log, ended: make(chan struct{}, 1)}
	ev := newEnv(t, opts{attempts: tries, recorder: rec})

	corrs := make([]string, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	errs := make(chan string, n)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			r := ev.post(fmt.Sprintf(`{"message":"load %d","callbackUrl":"%s/cb"}`, i, rcv.URL))
			var acc wire.WebhookAccepted
			if r.status != http.StatusAccepted || json.Unmarshal(r.body, &acc) != nil {
				errs <- fmt.Sprintf("message %d: %d %s", i, r.status, r.body)
				return
			}
			corrs[i] = acc.CorrelationID
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Every delivery ends first: a Shutdown hands the retries still
	// scheduled to the API instead.
	if err := rec.waitFinals(ctx, n); err != nil {
		t.Fatalf("deliveries did not end: %v", err)
	}
	if err := ev.h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rec.Flush(ctx); err != nil {
		t.Fatalf("the attempt log was not handed over: %v (%d pending)", err, rec.Pending())
	}

	outboxed := map[string]bool{}
	for _, m := range ev.h.Outbox().(*outbox.Outbox).Take(ctx, channelID, outbox.MaxLimit*100, 0) {
		outboxed[m.CorrelationID] = true
	}
	byMsg := map[string][]wire.WebhookAttempt{}
	api.mu.Lock()
	for _, a := range api.attempts {
		byMsg[a.CorrelationID] = append(byMsg[a.CorrelationID], a)
	}
	res := loadResult{messages: n, attempts: len(api.attempts), posts: api.posts}
	if len(api.attempts) > 0 {
		res.postCost = api.busy / time.Duration(len(api.attempts))
	}
	api.mu.Unlock()
	if rec.n > 0 {
		res.recordCost = rec.spent / time.Duration(rec.n)
	}

	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	for _, corr := range corrs {
		as := byMsg[corr]
		sort.Slice(as, func(i, j int) bool { return as[i].Attempt < as[j].Attempt })
		if len(as) == 0 {
			t.Fatalf("%s: no attempt in the log", corr)
		}
		id := as[0].WebhookID
		for i, a := range as {
			wantOutcome := wire.AttemptRetrying
			if i == len(as)-1 {
				wantOutcome = a.Outcome // checked below
			}
			if a.Attempt != i+1 || a.WebhookID != id || a.Outcome != wantOutcome || a.Kind != wire.AttemptDelivery {
				t.Fatalf("%s: attempt %d of the log = %+v", corr, i+1, a)
			}
		}
		last := as[len(as)-1]
		// The receiver saw this webhook-id exactly as often as the log says.
		if got := rcv.requests[id]; got != len(as) {
			t.Fatalf("%s: the receiver got %d requests, the log shows %d attempts", corr, got, len(as))
		}
		switch last.Outcome {
		case wire.AttemptDelivered:
			res.delivered++
			if rcv.delivered[id] != 1 || outboxed[corr] {
				t.Fatalf("%s: delivered per the log, receiver accepted it %d times, in the outbox: %v", corr, rcv.delivered[id], outboxed[corr])
			}
		case wire.AttemptFailed:
			res.outboxed++
			if rcv.delivered[id] != 0 || !outboxed[corr] || !strings.Contains(last.Error, "503") || len(as) != tries {
				t.Fatalf("%s: failed per the log after %d attempts (%s), receiver accepted %d, in the outbox: %v",
					corr, len(as), last.Error, rcv.delivered[id], outboxed[corr])
			}
		default:
			t.Fatalf("%s: last attempt %+v", corr, last)
		}
	}
	if res.delivered+res.outboxed != n || len(outboxed) != res.outboxed {
		t.Fatalf("delivered %d + outboxed %d != %d messages (outbox holds %d)", res.delivered, res.outboxed, n, len(outboxed))
	}
	res.elapsed = time.Since(start)
	return res
}

func TestAttemptLogUnderLoad(t *testing.T) {
	t.Parallel()
	// Two tries: 9 % of the messages fail both and go to the outbox (none
	// doing so has a chance of 0.91^100, below 1e-4), the rest is delivered,
	// some at the retry.
	res := runLoad(t, 100, 2, 24)
	if res.attempts <= res.messages || res.outboxed == 0 || res.delivered < 70 {
		t.Fatalf("result %+v: the receiver's failures did not show", res)
	}
	t.Logf("%d messages, %d attempts, %d delivered, %d outboxed, %d log POSTs; Record %v/attempt, log API %v/attempt; %v",
		res.messages, res.attempts, res.delivered, res.outboxed, res.posts, res.recordCost, res.postCost, res.elapsed)
}

// BenchmarkAttemptLogLoad is the 1,000-message version:
//
//	cd podagent && GOWORK=off go test -run '^$' -bench AttemptLogLoad -benchtime 1x ./internal/webhook/
func BenchmarkAttemptLogLoad(b *testing.B) {
	for i := range b.N {
		res := runLoad(b, 1000, 4, uint64(24+i))
		b.ReportMetric(float64(res.attempts), "attempts")
		b.ReportMetric(float64(res.outboxed), "outboxed")
		b.ReportMetric(float64(res.recordCost.Nanoseconds()), "record-ns/attempt")
		b.ReportMetric(float64(res.postCost.Nanoseconds()), "logapi-ns/attempt")
	}
}
