package webhook_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/podagent/internal/agentloop"
)

func percentile(ds []time.Duration, p float64) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[int(float64(len(s)-1)*p)]) / float64(time.Millisecond)
}

// BenchmarkWebhookSyncOverhead: a sync request through HTTP, the runtime
// token and channel secret checks, body parsing, the turn hand-off and the
// reply, minus the agent's own time (target ≤ 5 ms p50).
func BenchmarkWebhookSyncOverhead(b *testing.B) {
	ev := newEnv(b, opts{})
	var mu sync.Mutex
	var agentTime time.Duration
	ev.agent.setRun(func(_ context.Context, req agentloop.Request) (agentloop.Result, error) {
		start := time.Now()
		r := agentloop.Result{Reply: "ok: " + req.Message}
		mu.Lock()
		agentTime = time.Since(start)
		mu.Unlock()
		return r, nil
	})
	client := ev.srv.Client()
	body := `{"message":"hello","senderId":"bench","metadata":{"k":"v"}}`
	overheads := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req, _ := http.NewRequest(http.MethodPost, ev.srv.URL+"/agent/channels/webhook/incoming", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+runtimeToken)
		req.Header.Set("X-Webhook-Secret", secret)
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		res, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		total := time.Since(start)
		if res.StatusCode != 200 {
			b.Fatalf("status %d", res.StatusCode)
		}
		mu.Lock()
		overheads = append(overheads, total-agentTime)
		mu.Unlock()
	}
	b.StopTimer()
	b.ReportMetric(percentile(overheads, 0.5), "p50-overhead-ms")
	b.ReportMetric(percentile(overheads, 0.99), "p99-overhead-ms")
}

// BenchmarkWebhookCallbackLatency: from the moment the agent finishes to
// the moment the callback receiver has the signed POST (target ≤ 100 ms p50).
func BenchmarkWebhookCallbackLatency(b *testing.B) {
	ev := newEnv(b, opts{})
	finished := make(chan time.Time, 1)
	ev.agent.setRun(func(_ context.Context, req agentloop.Request) (agentloop.Result, error) {
		finished <- time.Now()
		return agentloop.Result{Reply: "ok: " + req.Message}, nil
	})
	arrived := make(chan time.Time, 1)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(204)
		arrived <- time.Now()
	}))
	defer rcv.Close()
	body := `{"message":"hello","callbackUrl":"` + rcv.URL + `/cb","metadata":{"k":"v"}}`
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := ev.post(body)
		if r.status != 202 {
			b.Fatalf("status %d %s", r.status, r.body)
		}
		t0, t1 := <-finished, <-arrived
		lat = append(lat, t1.Sub(t0))
	}
	b.StopTimer()
	b.ReportMetric(percentile(lat, 0.5), "p50-callback-ms")
	b.ReportMetric(percentile(lat, 0.99), "p99-callback-ms")
}
