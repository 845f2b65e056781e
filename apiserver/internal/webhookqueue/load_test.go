package webhookqueue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/apiserver/internal/webhookqueue"
)

// envInt reads a positive integer from the environment (def when unset).
func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: not a positive integer", name, v)
	}
	return n
}

// Load, faults, nothing lost: async replies over several projects, all
// handed to the API after the pod's attempts failed, against a receiver
// that fails 30 % of attempts and is down (503) for a stretch, delivered by
// two API replicas on one PostgreSQL, one of which stops abruptly midway
// (its claimed rows are left under lease, as after a kill). Every message
// is delivered at least once or still in the outbox, every request of a
// message carries its webhook-id, and the attempt log has exactly the
// receiver's count. CI size by default; the benchmark size is
// SVC_BENCH_WEBHOOK_MESSAGES=10000 SVC_BENCH_WEBHOOK_PROJECTS=100 (it logs the
// delivery rate and the SQL statements per attempt).
func TestLoadFaultsNothingLost(t *testing.T) {
	t.Parallel()
	msgs := envInt(t, "SVC_BENCH_WEBHOOK_MESSAGES", 200)
	projects := envInt(t, "SVC_BENCH_WEBHOOK_PROJECTS", 10)
	url := storetest.PostgresURL(t)
	stores := make([]*store.Store, 2)
	counters := make([]*atomic.Int64, 2)
	for i := range stores {
		s, err := store.Open(url, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		stores[i] = s
	}

	// The receiver: 30 % of attempts fail (a hash of webhook-id and
	// attempt, so the run is repeatable), and it is down for a stretch of
	// requests after the first quarter.
	var seen atomic.Int64
	downFrom, downTo := int64(msgs/4), int64(msgs/4+msgs/5)
	var idMu sync.Mutex
	corrOf := map[string]string{}
	var mixed atomic.Int64
	rcv := newReceiver(t, func(id string, n int) int {
		k := seen.Add(1)
		if k > downFrom && k <= downTo {
			return http.StatusServiceUnavailable
		}
		h := fnv.New32a()
		fmt.Fprintf(h, "%s/%d", id, n)
		if h.Sum32()%100 < 30 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	check := rcv.answer
	rcv.answer = func(id string, n int) int {
		rcv.mu.Lock()
		var body struct {
			CorrelationID string `json:"correlationId"`
		}
		_ = json.Unmarshal([]byte(rcv.bodies[id]), &body)
		rcv.mu.Unlock()
		idMu.Lock()
		if c, ok := corrOf[id]; ok && c != body.CorrelationID {
			mixed.Add(1)
		}
		corrOf[id] = body.CorrelationID
		idMu.Unlock()
		return check(id, n)
	}

	type msg struct{ pid, chID, corr string }
	var all []msg
	chans := make([][2]string, projects)
	for p := range projects {
		pid, chID := channel(t, stores[0], fmt.Sprintf("load%03d", p))
		chans[p] = [2]string{pid, chID}
	}
	for i := range msgs {
		c := chans[i%projects]
		corr := fmt.Sprintf("cor_load%06d", i)
		handOver(t, stores[0], c[0], c[1], corr, rcv.srv.URL+"/hook", 503)
		all = append(all, msg{c[0], c[1], corr})
	}
	for i, s := range stores {
		counters[i] = s.CountStatements()
	}

	start := time.Now()
	schedule := "1ms,1ms,1ms,1ms,1ms,1ms,1ms,1ms,1ms,1ms,1ms,1ms"
	var wg sync.WaitGroup
	ctxs := make([]context.CancelFunc, 2)
	for i, s := range stores {
		ctx, cancel := context.WithCancel(context.Background())
		ctxs[i] = cancel
		q := newQueue(s, nil, schedule, fmt.Sprintf("replica%d", i), true,
			webhookqueue.Options{Concurrency: 8, PollInterval: 5 * time.Millisecond, Lease: 2 * time.Second})
		wg.Add(1)
		go func() { defer wg.Done(); q.Run(ctx) }()
	}
	defer func() {
		for _, c := range ctxs {
			c()
		}
		wg.Wait()
	}()
	// One replica stops abruptly midway.
	eventually(t, time.Duration(max(120, msgs/10))*time.Second, "half the replies delivered", func() bool { _, oks := rcv.total(); return oks >= msgs/2 })
	ctxs[0]()
	done := func() bool {
		var queued int64
		if err := stores[1].DB().QueryRow(`SELECT count(*) FROM webhook_outbox WHERE next_attempt_at IS NOT NULL`).Scan(&queued); err != nil {
			t.Fatal(err)
		}
		return queued == 0
	}
	eventually(t, time.Duration(max(300, msgs/5))*time.Second, "the queue drained", done)
	elapsed := time.Since(start)
	ctxs[1]()
	wg.Wait()

	rcv.check(t)
	if n := mixed.Load(); n > 0 {
		t.Errorf("%d requests carried a webhook-id of another message", n)
	}
	requests, oks := rcv.total()
	var logged int64
	if err := stores[1].DB().QueryRow(`SELECT count(*) FROM webhook_attempts WHERE attempt > 8`).Scan(&logged); err != nil {
		t.Fatal(err)
	}
	if logged != int64(requests) {
		t.Errorf("attempt log has %d of the API's attempts, the receiver counted %d", logged, requests)
	}
	delivered, inOutbox, dups := 0, 0, 0
	for _, m := range all {
		row := outboxRow(t, stores[1], m.pid, m.corr)
		rcv.mu.Lock()
		ok := rcv.ok[webhookID(m.corr)]
		rcv.mu.Unlock()
		switch {
		case ok > 0 && row.QueueState == store.QueueDelivered:
			delivered++
		case ok == 0 && row.DeliveredAt == nil && row.Status == "replied":
			inOutbox++
		default:
			t.Errorf("%s: %d 2xx, row %+v", m.corr, ok, row)
		}
		if ok > 1 {
			dups++ // at least once: a lease that outlived a slow attempt
		}
	}
	stmts := counters[0].Load() + counters[1].Load()
	t.Logf("%d messages over %d projects: %d delivered (%d more than once), %d in the outbox; %d attempts (%d 2xx) in %v: %.1f deliveries/s; %.1f SQL statements per attempt (BEGIN/COMMIT not counted)",
		msgs, projects, delivered, dups, inOutbox, requests, oks, elapsed.Round(time.Millisecond),
		float64(delivered)/elapsed.Seconds(), float64(stmts)/float64(max(requests, 1)))
}
