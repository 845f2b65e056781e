package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/gateway"
	"github.com/svc-dev/svc/shared/testenv"
)

// BenchmarkGatewayReport is the gateway's benchmark report (`make
// bench-gateway`; docs/performance.md): what neutral gateway benchmarks
// publish, each figure beside a bare Go reverse proxy (httputil, its own
// process) measured in the same run against the same upstream (canned
// bytes, in the benchmark process):
//
//  1. added p50 / p99 at one client, per path: the bare proxy; the gateway's
//     chat completions with its features present but unused (one deployment,
//     one key, tracing off); with two deployments and a two-key pool; the
//     Responses and Messages translations; a baseline build when given;
//  2. a concurrency sweep: req/s and added p99 per level, the highest
//     throughput whose added p99 stays ≤ 1 ms, and req/s at 32 clients as a
//     ratio to the bare proxy;
//  3. streaming: added time to the first token, frames dropped and frames
//     batched (arriving less than a quarter of the upstream's gap after the
//     previous one);
//  4. memory: per open stream (heap+stacks, RSS, goroutines) at
//     SVC_BENCH_STREAMS held streams, and the RSS under sustained load at 32
//     clients until it levels off.
//
// Environment: SVC_BENCH_BASELINE_BIN (another apiserver binary, run beside
// this one on the same database; scripts/bench-baseline.sh builds one from a
// commit), SVC_BENCH_REQUESTS (c1 requests per path, default 2000),
// SVC_BENCH_DURATION (per sweep level, default 2s), SVC_BENCH_STREAMS
// (default 2000), SVC_BENCH_FRAMES and SVC_BENCH_FRAME_GAP (upstream stream
// shape, default 8 frames 2 ms apart), SVC_BENCH_SKIP (comma list of
// latency,sweep,c32,stream,memory,sustained).
func BenchmarkGatewayReport(b *testing.B) {
	r := newReport(b)
	skip := os.Getenv("SVC_BENCH_SKIP")
	for i := 0; i < b.N; i++ {
		fmt.Printf("\n== gateway report (GOMAXPROCS of the client %d; load %s)\n", runtimeProcs(), loadAvg())
		if !strings.Contains(skip, "latency") {
			r.latency()
		}
		if !strings.Contains(skip, "sweep") {
			r.sweep()
		}
		if !strings.Contains(skip, "c32") {
			r.throughput()
		}
		if !strings.Contains(skip, "stream") {
			r.streaming()
		}
		if !strings.Contains(skip, "memory") {
			r.heldStreams()
		}
		if !strings.Contains(skip, "sustained") {
			r.sustained()
		}
	}
}

// benchPath is one way to send a completion: where, with which body.
type benchPath struct {
	name         string
	url          string
	header       http.Header
	body, stream []byte
	marker       []byte // a line holding one relayed content frame
	pid          int    // the serving process (0: the benchmark's own upstream)
	stats        string // its /metrics (apiserver) or /__stats (bare proxy)
	hc           *http.Client
}

type report struct {
	b        *testing.B
	up       *benchUpstream
	h2up     *benchUpstream // the same over TLS and HTTP/2 (heldStreams)
	h2       benchPath      // the gateway's chat to h2up
	bare     *bareProxy
	gw, base *api
	pprof    string
	direct   benchPath
	paths    []benchPath // bare first
	requests int
	duration time.Duration
	streams  int
	env      *env    // the gateway's (its database and catalog)
	acc      account // the account every gateway path uses
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil && d > 0 {
		return d
	}
	return def
}

func newReport(b *testing.B) *report {
	r := &report{b: b, requests: envInt("SVC_BENCH_REQUESTS", 2000),
		duration: envDuration("SVC_BENCH_DURATION", 2*time.Second), streams: envInt("SVC_BENCH_STREAMS", 2000)}
	r.up = newBenchUpstream(b, envInt("SVC_BENCH_FRAMES", 8), envDuration("SVC_BENCH_FRAME_GAP", 2*time.Millisecond))
	backup := newBenchUpstream(b, 1, 0)
	h2up, h2cert := newBenchUpstreamTLS(b, envInt("SVC_BENCH_FRAMES", 8), envDuration("SVC_BENCH_FRAME_GAP", 2*time.Millisecond))
	r.h2up = h2up
	e := newEnv(b)
	must(b, os.WriteFile(e.models, fmt.Appendf(nil, `providers:
  - {name: main, type: openai, base_url: %q, api_key_env: FAKE_UPSTREAM_KEY}
  - {name: pool, type: openai, base_url: %q,
     api_keys: [{name: a, env: FAKE_UPSTREAM_KEY}, {name: b, env: FAKE_UPSTREAM_KEY}]}
  - {name: backup, type: openai, base_url: %q, api_key_env: FAKE_UPSTREAM_KEY}
  - {name: h2, type: openai, base_url: %q, api_key_env: FAKE_UPSTREAM_KEY}
models:
  - {id: svc-plain, tier: standard, provider: main, upstream_model: up-2, reasoning_effort: medium,
     price: {input_per_mtok: 3, output_per_mtok: 15}}
  - {id: svc-pool, tier: standard, reasoning_effort: medium, price: {input_per_mtok: 3, output_per_mtok: 15},
     deployments: [{provider: pool, upstream_model: up-2}, {provider: backup, upstream_model: up-2}]}
  - {id: svc-h2, tier: standard, provider: h2, upstream_model: up-2, price: {input_per_mtok: 3, output_per_mtok: 15}}
`, r.up.BaseURL(), r.up.BaseURL(), backup.BaseURL(), h2up.BaseURL()), 0o600))
	port, err := testenv.FreePort()
	must(b, err)
	r.pprof = fmt.Sprintf("127.0.0.1:%d", port)
	// SSL_CERT_FILE: the gateway trusts the TLS upstream's certificate
	// (and only it; every other upstream here is plain HTTP).
	r.gw = e.startAPI("SVC_PPROF_ADDR="+r.pprof, "SSL_CERT_FILE="+h2cert)
	if bin := os.Getenv("SVC_BENCH_BASELINE_BIN"); bin != "" {
		r.base = startAPIBinary(e, bin)
	}
	r.bare = startBareProxy(b, r.up.BaseURL())
	acc := e.account("bench")
	r.env, r.acc = e, acc

	client := func() *http.Client {
		return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512, DisableCompression: true}}
	}
	bearer := http.Header{"Authorization": {"Bearer " + acc.key}, "Content-Type": {"application/json"}}
	chat := func(model string) ([]byte, []byte) {
		return fmt.Appendf(nil, `{"model":%q,"messages":[{"role":"user","content":"benchmark request body"}]}`, model),
			fmt.Appendf(nil, `{"model":%q,"stream":true,"messages":[{"role":"user","content":"benchmark request body"}]}`, model)
	}
	chatMarker := []byte(`"content":"tok`)
	upBody, upStream := chat("up-2")
	r.direct = benchPath{name: "direct (upstream)", url: r.up.BaseURL() + "/chat/completions", header: bearer,
		body: upBody, stream: upStream, marker: chatMarker, hc: client()}
	r.paths = append(r.paths, benchPath{name: "bare reverse proxy", url: r.bare.URL + "/v1/chat/completions", header: bearer,
		body: upBody, stream: upStream, marker: chatMarker, pid: r.bare.cmd.Process.Pid, stats: r.bare.URL + "/__stats", hc: client()})
	plain, plainStream := chat("svc-plain")
	r.paths = append(r.paths, benchPath{name: "gateway chat", url: r.gw.URL + "/v1/chat/completions", header: bearer,
		body: plain, stream: plainStream, marker: chatMarker, pid: r.gw.cmd.Process.Pid, stats: r.gw.URL + "/metrics", hc: client()})
	pool, poolStream := chat("svc-pool")
	r.paths = append(r.paths, benchPath{name: "gateway chat, 2 deployments + 2-key pool", url: r.gw.URL + "/v1/chat/completions",
		header: bearer, body: pool, stream: poolStream, marker: chatMarker, pid: r.gw.cmd.Process.Pid, stats: r.gw.URL + "/metrics", hc: client()})
	r.paths = append(r.paths, benchPath{name: "gateway responses", url: r.gw.URL + "/v1/responses", header: bearer,
		body:   []byte(`{"model":"svc-plain","input":"benchmark request body"}`),
		stream: []byte(`{"model":"svc-plain","stream":true,"input":"benchmark request body"}`),
		marker: []byte(`"type":"response.output_text.delta"`), pid: r.gw.cmd.Process.Pid, stats: r.gw.URL + "/metrics", hc: client()})
	r.paths = append(r.paths, benchPath{name: "gateway messages", url: r.gw.URL + "/v1/messages",
		header: http.Header{"X-Api-Key": {acc.key}, "Content-Type": {"application/json"}, "Anthropic-Version": {"2023-06-01"}},
		body:   []byte(`{"model":"svc-plain","max_tokens":64,"messages":[{"role":"user","content":"benchmark request body"}]}`),
		stream: []byte(`{"model":"svc-plain","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"benchmark request body"}]}`),
		marker: []byte(`"type":"text_delta"`), pid: r.gw.cmd.Process.Pid, stats: r.gw.URL + "/metrics", hc: client()})
	h2Plain, h2Stream := chat("svc-h2")
	r.h2 = benchPath{name: "gateway chat, HTTP/2 upstream (TLS)", url: r.gw.URL + "/v1/chat/completions", header: bearer,
		body: h2Plain, stream: h2Stream, marker: chatMarker, pid: r.gw.cmd.Process.Pid, stats: r.gw.URL + "/metrics", hc: client()}
	for i := 0; i < 50; i++ {
		if _, err := r.h2.do(r.h2.body); err != nil {
			b.Fatalf("%s: %v", r.h2.name, err)
		}
	}
	if r.base != nil {
		r.paths = append(r.paths, benchPath{name: "baseline chat", url: r.base.URL + "/v1/chat/completions", header: bearer,
			body: plain, stream: plainStream, marker: chatMarker, pid: r.base.cmd.Process.Pid, stats: r.base.URL + "/metrics", hc: client()})
		r.paths = append(r.paths, benchPath{name: "baseline chat, 2 deployments + 2-key pool", url: r.base.URL + "/v1/chat/completions",
			header: bearer, body: pool, stream: poolStream, marker: chatMarker, pid: r.base.cmd.Process.Pid, stats: r.base.URL + "/metrics", hc: client()})
	}
	// Warm every path (connections, caches, prepared statements); a path
	// that does not answer (a baseline without that wire format) is dropped.
	var kept []benchPath
	for _, p := range append([]benchPath{r.direct}, r.paths...) {
		ok := true
		for i := 0; i < 50 && ok; i++ {
			if _, err := p.do(p.body); err != nil {
				fmt.Printf("%s: not measured: %v\n", p.name, err)
				ok = false
			}
		}
		if ok && p.name != r.direct.name {
			kept = append(kept, p)
		}
	}
	r.paths = kept
	return r
}

// startAPIBinary starts another apiserver binary (a baseline build) on e's
// database and catalog files.
func startAPIBinary(e *env, bin string, extraEnv ...string) *api {
	saved := apiserverBin
	apiserverBin = bin
	defer func() { apiserverBin = saved }()
	return e.startAPI(extraEnv...)
}

func (p benchPath) request(body []byte) *http.Request {
	req, _ := http.NewRequest(http.MethodPost, p.url, bytes.NewReader(body))
	for k, v := range p.header {
		req.Header[k] = v
	}
	return req
}

// do sends one plain completion and reads the whole answer.
func (p benchPath) do(body []byte) (time.Duration, error) {
	start := time.Now()
	resp, err := p.hc.Do(p.request(body))
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return time.Since(start), fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return time.Since(start), err
}

// latency: added p50/p99 at one client, paths interleaved in rounds so
// that drift of the machine touches each alike; the serving process's CPU
// time and heap allocations per request of each path.
func (r *report) latency() {
	const rounds = 10
	per := max(r.requests/rounds, 1)
	lat := make([][]time.Duration, len(r.paths))
	cpu := make([]time.Duration, len(r.paths))
	allocs := make([]int64, len(r.paths))
	scrape := map[int]int64{} // the allocations of one read of a process's counter
	for _, p := range r.paths {
		a, b := p.mallocs(r.b), p.mallocs(r.b)
		scrape[p.pid] = b - a
	}
	var direct []time.Duration
	for round := 0; round < rounds; round++ {
		for i := -1; i < len(r.paths); i++ {
			p := r.direct
			if i >= 0 {
				p = r.paths[i]
			}
			var cpu0 time.Duration
			var m0 int64
			if i >= 0 {
				cpu0, m0 = processCPU(r.b, p.pid), p.mallocs(r.b)
			}
			for n := 0; n < per; n++ {
				d, err := p.do(p.body)
				if err != nil {
					r.b.Fatalf("%s: %v", p.name, err)
				}
				if i < 0 {
					direct = append(direct, d)
				} else {
					lat[i] = append(lat[i], d)
				}
			}
			if i >= 0 {
				cpu[i] += processCPU(r.b, p.pid) - cpu0
				allocs[i] += p.mallocs(r.b) - m0 - scrape[p.pid]
			}
		}
	}
	n := per * rounds
	fmt.Printf("\n-- plain completions, one client (%d requests per path, %d interleaved rounds)\n", n, rounds)
	fmt.Printf("%-44s %10s %10s %10s %10s %12s %11s\n", "path", "p50 µs", "p99 µs", "added p50", "added p99", "CPU µs/req", "allocs/req")
	dp50, dp99 := pct(direct, 50), pct(direct, 99)
	fmt.Printf("%-44s %10.0f %10.0f %10s %10s %12s %11s\n", r.direct.name, us(dp50), us(dp99), "-", "-", "-", "-")
	chat := time.Duration(0)
	for i, p := range r.paths {
		p50, p99 := pct(lat[i], 50), pct(lat[i], 99)
		if p.name == "gateway chat" {
			chat = p50
		}
		fmt.Printf("%-44s %10.0f %10.0f %10.0f %10.0f %12.0f %11.0f\n", p.name, us(p50), us(p99), us(p50-dp50), us(p99-dp99),
			us(cpu[i])/float64(n), float64(allocs[i])/float64(n))
	}
	for i, p := range r.paths {
		if strings.HasPrefix(p.name, "gateway responses") || strings.HasPrefix(p.name, "gateway messages") {
			fmt.Printf("%s over gateway chat: %+.0f µs p50\n", p.name, us(pct(lat[i], 50)-chat))
		}
	}
}

// mallocs is the count of heap allocations the serving process made so far
// (its Go runtime's count: independent of the machine's load).
func (p benchPath) mallocs(b *testing.B) int64 {
	resp, err := http.Get(p.stats)
	must(b, err)
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	must(b, err)
	if i := bytes.Index(raw, []byte(`"mallocs":`)); i >= 0 { // the bare proxy's /__stats
		v := raw[i+len(`"mallocs":`):]
		n, _ := strconv.ParseInt(string(v[:bytes.IndexAny(v, ",}")]), 10, 64)
		return n
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, "go_memstats_mallocs_total "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return int64(f)
		}
	}
	b.Fatalf("%s: no allocation count", p.stats)
	return 0
}

// load runs clients sending plain completions for d; it returns req/s and
// the latencies.
func (p benchPath) load(b *testing.B, clients int, d time.Duration) (float64, []time.Duration) {
	var mu sync.Mutex
	var all []time.Duration
	var failed atomic.Int64
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for time.Now().Before(deadline) {
				lat, err := p.do(p.body)
				if err != nil {
					failed.Add(1)
					continue
				}
				mine = append(mine, lat)
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		b.Errorf("%s: %d requests failed at %d clients", p.name, n, clients)
	}
	return float64(len(all)) / time.Since(start).Seconds(), all
}

// sweep: throughput and added p99 per concurrency level.
func (r *report) sweep() {
	levels := []int{1, 4, 8, 16, 32, 64}
	type cell struct {
		rps float64
		p99 time.Duration
	}
	res := make([][]cell, len(r.paths))
	var direct []cell
	for _, c := range levels {
		rps, lat := r.direct.load(r.b, c, r.duration)
		direct = append(direct, cell{rps, pct(lat, 99)})
		for i, p := range r.paths {
			rps, lat := p.load(r.b, c, r.duration)
			res[i] = append(res[i], cell{rps, pct(lat, 99)})
		}
	}
	fmt.Printf("\n-- plain completions, concurrency sweep (%v per level): req/s (added p99 µs)\n", r.duration)
	fmt.Printf("%-44s", "path")
	for _, c := range levels {
		fmt.Printf(" %16s", fmt.Sprintf("c%d", c))
	}
	fmt.Printf(" %22s %10s\n", "best req/s @p99+≤1ms", "c32 ratio")
	fmt.Printf("%-44s", r.direct.name)
	for _, d := range direct {
		fmt.Printf(" %16s", fmt.Sprintf("%.0f (p99 %.0f)", d.rps, us(d.p99)))
	}
	fmt.Println()
	c32 := 4
	bare := res[0][c32].rps
	for i, p := range r.paths {
		fmt.Printf("%-44s", p.name)
		best := 0.0
		for j, cl := range res[i] {
			added := cl.p99 - direct[j].p99
			fmt.Printf(" %16s", fmt.Sprintf("%.0f (%+.0f)", cl.rps, us(added)))
			if added <= time.Millisecond && cl.rps > best {
				best = cl.rps
			}
		}
		fmt.Printf(" %22.0f %9.2f×\n", best, res[i][c32].rps/bare)
	}
}

// stream opens one stream and reads it to the end: time to the first
// content frame, frames seen and frames batched.
func (p benchPath) streamOnce(gap time.Duration, timings map[string][]time.Duration) (ttfb time.Duration, frames, batched int, err error) {
	start := time.Now()
	resp, err := p.hc.Do(p.request(p.stream))
	if err != nil {
		return 0, 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	serverTimings(resp.Header, timings)
	br := bufio.NewReaderSize(resp.Body, 4096)
	var last time.Time
	for {
		line, err := br.ReadSlice('\n')
		if bytes.HasPrefix(line, []byte("data:")) && bytes.Contains(line, p.marker) {
			now := time.Now()
			if frames == 0 {
				ttfb = now.Sub(start)
			} else if gap > 0 && now.Sub(last) < gap/4 {
				batched++
			}
			last = now
			frames++
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			break
		}
	}
	return ttfb, frames, batched, nil
}

// serverTimings adds a gateway answer's overhead and Server-Timing phases
// (auth, admit, upstream) to into, by name.
func serverTimings(h http.Header, into map[string][]time.Duration) {
	if into == nil {
		return
	}
	add := func(name, ms string) {
		if v, err := strconv.ParseFloat(ms, 64); err == nil {
			into[name] = append(into[name], time.Duration(v*float64(time.Millisecond)))
		}
	}
	if v := h.Get(gateway.HeaderOverhead); v != "" {
		add("overhead", v)
	}
	for _, part := range strings.Split(h.Get(gateway.HeaderServerTiming), ",") {
		name, dur, ok := strings.Cut(strings.TrimSpace(part), ";dur=")
		if ok {
			add(name, dur)
		}
	}
}

// streaming: added time to the first token at one client, dropped and
// batched frames.
func (r *report) streaming() {
	const rounds = 10
	per := max(r.requests/rounds/4, 1)
	type acc struct {
		ttfb             []time.Duration
		frames, batched  int
		streams, dropped int
		allocs           int64
		timings          map[string][]time.Duration
	}
	res := make([]acc, len(r.paths)+1)
	scrape := map[int]int64{}
	for _, p := range r.paths {
		a, b := p.mallocs(r.b), p.mallocs(r.b)
		scrape[p.pid] = b - a
	}
	for round := 0; round < rounds; round++ {
		for i := -1; i < len(r.paths); i++ {
			p := r.direct
			if i >= 0 {
				p = r.paths[i]
			}
			a := &res[i+1]
			var m0 int64
			if i >= 0 {
				m0 = p.mallocs(r.b)
			}
			for n := 0; n < per; n++ {
				if a.timings == nil {
					a.timings = map[string][]time.Duration{}
				}
				t, f, bt, err := p.streamOnce(r.up.gap, a.timings)
				if err != nil {
					r.b.Fatalf("%s stream: %v", p.name, err)
				}
				a.ttfb = append(a.ttfb, t)
				a.frames += f
				a.batched += bt
				a.streams++
				a.dropped += max(r.up.frames-f, 0)
			}
			if i >= 0 {
				a.allocs += p.mallocs(r.b) - m0 - scrape[p.pid]
			}
		}
	}
	fmt.Printf("\n-- streams, one client (%d per path; upstream: %d frames %v apart)\n", per*rounds, r.up.frames, r.up.gap)
	fmt.Printf("%-44s %12s %12s %12s %12s %8s %8s %13s\n", "path", "TTFT p50 µs", "TTFT p99 µs", "added p50", "added p99", "dropped", "batched", "allocs/stream")
	d50, d99 := pct(res[0].ttfb, 50), pct(res[0].ttfb, 99)
	for i := range res {
		name := r.direct.name
		if i > 0 {
			name = r.paths[i-1].name
		}
		a := res[i]
		p50, p99 := pct(a.ttfb, 50), pct(a.ttfb, 99)
		fmt.Printf("%-44s %12.0f %12.0f %12.0f %12.0f %8d %8d %13.0f\n", name, us(p50), us(p99), us(p50-d50), us(p99-d99), a.dropped, a.batched,
			float64(a.allocs)/float64(max(a.streams, 1)))
	}
	fmt.Printf("the gateways' own account (X-Svc-Overhead-Duration-Ms, Server-Timing), p50 µs:\n")
	fmt.Printf("%-44s %10s %10s %10s %10s\n", "path", "overhead", "auth", "admit", "upstream")
	for i := 1; i < len(res); i++ {
		tm := res[i].timings
		if len(tm["overhead"]) == 0 {
			continue
		}
		fmt.Printf("%-44s %10.0f %10.0f %10.0f %10.0f\n", r.paths[i-1].name, us(pct(tm["overhead"], 50)), us(pct(tm["auth"], 50)),
			us(pct(tm["admit"], 50)), us(pct(tm["upstream"], 50)))
	}
}

// heldStreams: memory per open stream with SVC_BENCH_STREAMS streams held
// after their first frame, for the bare proxy and the gateway, and for the
// gateway with an HTTP/2 upstream (net/http's HTTP/1 client keeps a read and
// a write goroutine per upstream connection, so each stream to an HTTP/1.1
// upstream costs two goroutines besides its relay; over HTTP/2 the streams
// share one connection's).
func (r *report) heldStreams() {
	fmt.Printf("\n-- %d held streams (after a GC): memory per open stream\n", r.streams)
	fmt.Printf("%-44s %16s %14s %14s %16s\n", "path", "heap+stacks KiB", "stacks KiB", "RSS KiB", "goroutines")
	for _, p := range append(r.paths[:2:2], r.h2) { // the bare proxy, the gateway's chat, over HTTP/2
		stats := func() memSample { return r.memOf(p) }
		before := stats()
		body := bytes.Replace(p.stream, []byte("benchmark request body"), []byte("hold the stream"), 1)
		var wg sync.WaitGroup
		opened := make(chan error, r.streams)
		bodies := make(chan io.ReadCloser, r.streams)
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: r.streams, DisableCompression: true}}
		for s := 0; s < r.streams; s++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := hc.Do(p.request(body))
				if err == nil && resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
				if err != nil {
					opened <- err
					return
				}
				line, err := bufio.NewReader(resp.Body).ReadString('\n')
				if err == nil && !strings.HasPrefix(line, "data: {") {
					err = fmt.Errorf("first line %q", line)
				}
				opened <- err
				bodies <- resp.Body
			}()
		}
		for s := 0; s < r.streams; s++ {
			if err := <-opened; err != nil {
				r.up.release()
				r.h2up.release()
				r.b.Fatalf("%s: stream %d: %v", p.name, s, err)
			}
		}
		during := stats()
		r.up.release()
		r.h2up.release()
		wg.Wait()
		close(bodies)
		for rc := range bodies {
			_, _ = io.Copy(io.Discard, rc)
			rc.Close()
		}
		hc.CloseIdleConnections()
		n := float64(r.streams)
		fmt.Printf("%-44s %16.1f %14.1f %14.1f %16.2f\n", p.name, float64(during.heap-before.heap)/n/1024,
			float64(during.stacks-before.stacks)/n/1024, float64(during.rss-before.rss)/n/1024,
			float64(during.goroutines-before.goroutines)/n)
	}
}

func (r *report) memOf(p benchPath) memSample {
	if p.pid == r.bare.cmd.Process.Pid {
		return r.bare.stats(r.b)
	}
	m := memFigures(r.b, r.gw.URL, r.pprof)
	m.rss = rssOf(r.b, p.pid)
	return m
}

// sustained: RSS under 32 clients of plain completions, sampled every
// second until three samples in a row are within 2 % (at most 60 s).
func (r *report) sustained() {
	fmt.Printf("\n-- RSS under sustained load (32 clients, plain chat) until it levels off\n")
	fmt.Printf("%-44s %12s %12s %10s %10s\n", "path", "idle MiB", "level MiB", "seconds", "req/s")
	for _, p := range r.paths[:3] {
		idle := rssOf(r.b, p.pid)
		var samples []int64
		start := time.Now()
		var total float64
		for len(samples) < 60 {
			rps, _ := p.load(r.b, 32, time.Second)
			total += rps
			samples = append(samples, rssOf(r.b, p.pid))
			if n := len(samples); n >= 3 && within(samples[n-3:], 0.02) {
				break
			}
		}
		fmt.Printf("%-44s %12.1f %12.1f %10.0f %10.0f\n", p.name, mib(idle), mib(samples[len(samples)-1]),
			time.Since(start).Seconds(), total/float64(len(samples)))
	}
}

func within(s []int64, frac float64) bool {
	lo, hi := s[0], s[0]
	for _, v := range s {
		lo, hi = min(lo, v), max(hi, v)
	}
	return float64(hi-lo) <= frac*float64(hi)
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }

func loadAvg() string {
	raw, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
