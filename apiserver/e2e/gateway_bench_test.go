package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/testenv/fakeupstream"
	"github.com/svc-dev/svc/shared/testenv/testhttp"
)

// BenchmarkGatewayAddedLatency measures what the gateway adds on top of the
// upstream: the same plain completion sent at a fixed concurrency straight to
// the fake upstream, then through a real apiserver process with Postgres
// auth, rate limiting, usage windows and metering on. The model lists two
// deployments (the second never needed) and tracing is off. Reported:
// p50/p99 of each path, the added p50/p99, gateway throughput, and the
// apiserver process's CPU time per request (steadier than latency on a
// shared machine). SVC_BENCH_DEPLOYMENTS=1 writes the single-provider form
// instead (comparable with binaries from before deployments existed).
func BenchmarkGatewayAddedLatency(b *testing.B) { benchGatewayAdded(b, false) }

// BenchmarkGatewayAddedLatencyTracing is the same with tracing on: every
// request's spans exported over OTLP/HTTP to a receiver in the test.
func BenchmarkGatewayAddedLatencyTracing(b *testing.B) { benchGatewayAdded(b, true) }

func benchGatewayAdded(b *testing.B, tracing bool) {
	concurrency := benchConcurrency()
	e := newEnv(b)
	models := fmt.Sprintf(`providers:
  - {name: main, type: openai, base_url: %q, api_key_env: FAKE_UPSTREAM_KEY}
  - {name: backup, type: openai, base_url: %q, api_key_env: FAKE_UPSTREAM_KEY}
models:
  - {id: svc-2-0, tier: standard, reasoning_effort: medium, price: {input_per_mtok: 3, output_per_mtok: 15},
     deployments: [{provider: main, upstream_model: up-2}, {provider: backup, upstream_model: up-2}]}
`, e.upstream.BaseURL(), fakeupstream.New(b).BaseURL())
	if os.Getenv("SVC_BENCH_DEPLOYMENTS") == "1" {
		models = fmt.Sprintf(`providers:
  - {name: main, type: openai, base_url: %q, api_key_env: FAKE_UPSTREAM_KEY}
models:
  - {id: svc-2-0, tier: standard, provider: main, upstream_model: up-2, reasoning_effort: medium,
     price: {input_per_mtok: 3, output_per_mtok: 15}}
`, e.upstream.BaseURL())
	}
	must(b, os.WriteFile(e.models, []byte(models), 0o600))
	var extra []string
	if tracing {
		extra = append(extra, "SVC_OTEL_EXPORTER_OTLP_ENDPOINT="+newOTLPReceiver(b).URL)
	}
	a := e.startAPI(extra...)
	acc := e.account("bench")
	body := []byte(`{"model":"svc-2-0","messages":[{"role":"user","content":"benchmark request body"}]}`)
	upBody := []byte(`{"model":"up-2","messages":[{"role":"user","content":"benchmark request body"}],"reasoning_effort":"medium"}`)
	tr := &http.Transport{MaxIdleConnsPerHost: concurrency * 2}
	hc := &http.Client{Transport: tr}
	run := func(url, key string, payload []byte, n int) ([]time.Duration, time.Duration) {
		lat := make([]time.Duration, n)
		var wg sync.WaitGroup
		next := make(chan int, n)
		for i := 0; i < n; i++ {
			next <- i
		}
		close(next)
		start := time.Now()
		for w := 0; w < concurrency; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(payload))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Authorization", "Bearer "+key)
					d, err := testhttp.Timed(hc, req)
					lat[i] = d
					if err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return lat, time.Since(start)
	}
	n := b.N
	if n < 200 {
		n = 200
	}
	// Warm both paths (connections, prepared statements, caches).
	run(e.upstream.BaseURL()+"/chat/completions", "x", upBody, 100)
	run(a.URL+"/v1/chat/completions", acc.key, body, 100)
	b.ResetTimer()
	direct, _ := run(e.upstream.BaseURL()+"/chat/completions", "x", upBody, n)
	cpu0 := processCPU(b, a.cmd.Process.Pid)
	gw, gwWall := run(a.URL+"/v1/chat/completions", acc.key, body, n)
	cpu := processCPU(b, a.cmd.Process.Pid) - cpu0
	b.StopTimer()
	b.ReportMetric(us(cpu)/float64(n), "gateway-cpu-µs/req")
	dp50, dp99 := pct(direct, 50), pct(direct, 99)
	gp50, gp99 := pct(gw, 50), pct(gw, 99)
	b.ReportMetric(us(dp50), "direct-p50-µs")
	b.ReportMetric(us(gp50), "gateway-p50-µs")
	b.ReportMetric(us(gp50-dp50), "added-p50-µs")
	b.ReportMetric(us(gp99-dp99), "added-p99-µs")
	b.ReportMetric(float64(n)/gwWall.Seconds(), "gateway-req/s")
	b.Logf("n=%d concurrency=%d direct p50=%v p99=%v; gateway p50=%v p99=%v", n, concurrency, dp50, dp99, gp50, gp99)
}

// processCPU is the user+system CPU time a process has used so far
// (/proc/<pid>/stat, in clock ticks of 10 ms).
func processCPU(b *testing.B, pid int) time.Duration {
	st, err := readProcStat(pid)
	if err != nil {
		b.Fatalf("/proc/%d/stat: %v", pid, err)
	}
	return st.cpu
}

func pct(d []time.Duration, p int) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[(len(s)-1)*p/100]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// benchConcurrency is 8 unless SVC_BENCH_CONCURRENCY says otherwise.
func benchConcurrency() int {
	if n, err := strconv.Atoi(os.Getenv("SVC_BENCH_CONCURRENCY")); err == nil && n > 0 {
		return n
	}
	return 8
}
