package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"testing"
	"time"
)

// BenchmarkGovernedBoard is the gateway measured in the shape of the public
// gateway boards (docs/performance.md, "Governed speed"), with every
// governance feature on — an API key, a credit budget on the key (one
// reservation and one settlement per request), plan rate limits and usage
// windows, usage metering and Prometheus metrics — beside a bare Go reverse
// proxy measured in the same run against the same mock upstream:
//
//  1. added latency at one client: p50 and p99 minus the direct-to-mock
//     figures;
//  2. the throughput frontier: from one concurrency sweep, the most req/s
//     whose p99 stays within 1, 5, 10 and 50 ms;
//  3. streams: added time to the first token (p50, p99) and stall-free
//     streams (every frame received, none batched behind a stall).
//
// The raw figures are written as JSON to SVC_BENCH_JSON (default
// governed-board.json in the working directory). Publish only a run on a
// quiet machine (load < 1.5), e.g.:
//
//	make build && cd apiserver && SVC_BIN_DIR=$PWD/../bin SVC_BENCH_JSON=$PWD/../docs/bench/governed-board.json \
//	  GOWORK=off go test -run '^$' -bench BenchmarkGovernedBoard -benchtime 1x -timeout 30m ./e2e/
//
// Environment as BenchmarkGatewayReport's (SVC_BENCH_REQUESTS,
// SVC_BENCH_DURATION, SVC_BENCH_FRAMES, SVC_BENCH_FRAME_GAP), and
// SVC_BENCH_CPUPROFILE: a file for the gateway's CPU profile over the sweep.
func BenchmarkGovernedBoard(b *testing.B) {
	r := newReport(b)
	// The key's own budget: large enough never to refuse, checked on every request.
	r.env.admin("key", "set-budget", "--id", r.acc.keyID, "--credits", "1000000000", "--window", "monthly")
	var bare, gw benchPath
	for _, p := range r.paths {
		switch p.name {
		case "bare reverse proxy":
			bare = p
		case "gateway chat":
			gw = p
		}
	}
	if bare.url == "" || gw.url == "" {
		b.Fatal("the bare proxy or the gateway is not measured")
	}
	gap := envDuration("SVC_BENCH_FRAME_GAP", 2*time.Millisecond)
	frames := envInt("SVC_BENCH_FRAMES", 8)
	for i := 0; i < b.N; i++ {
		board := governedBoard{Load: loadAvg(), GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU(),
			Governance: []string{"api key", "key budget (reserve + settle)", "plan rate limits", "usage windows", "usage metering", "metrics"}}
		paths := []benchPath{r.direct, bare, gw}
		// 1. c=1, interleaved rounds.
		lat := make([][]time.Duration, len(paths))
		const rounds = 10
		per := max(r.requests/rounds, 1)
		for round := 0; round < rounds; round++ {
			for j, p := range paths {
				for n := 0; n < per; n++ {
					d, err := p.do(p.body)
					if err != nil {
						b.Fatalf("%s: %v", p.name, err)
					}
					lat[j] = append(lat[j], d)
				}
			}
		}
		dp50, dp99 := pct(lat[0], 50), pct(lat[0], 99)
		// 2. one sweep; 3. streams.
		// The sweep's levels are interleaved (each level on the bare proxy,
		// then on the gateway) so that drift of the machine touches both
		// lanes alike.
		levels := []int{1, 2, 4, 8, 16, 32, 64, 128}
		profiled := r.profileGateway(time.Duration(2*len(levels)) * r.duration)
		for j, p := range paths[1:] {
			board.Lanes = append(board.Lanes, governedLane{Name: p.name,
				AddedP50us: us(pct(lat[j+1], 50) - dp50), AddedP99us: us(pct(lat[j+1], 99) - dp99), Frontier: map[string]float64{}})
		}
		for _, c := range levels {
			for j, p := range paths[1:] {
				rps, l := p.load(b, c, r.duration)
				board.Lanes[j].Sweep = append(board.Lanes[j].Sweep, sweepPoint{Clients: c, RPS: rps, P99us: us(pct(l, 99))})
			}
		}
		if err := <-profiled; err != nil {
			b.Fatal(err)
		}
		for j := range board.Lanes {
			for _, bound := range frontierBounds {
				board.Lanes[j].Frontier[frontierKey(bound)] = frontier(board.Lanes[j].Sweep, bound)
			}
		}
		var ttfb [3][]time.Duration
		stallFree := [3]int{}
		timings := [3]map[string][]time.Duration{{}, {}, {}}
		streams := max(r.requests/4, 1)
		for n := 0; n < streams; n++ {
			for j, p := range paths {
				t, got, batched, err := p.streamOnce(gap, timings[j])
				if err != nil {
					b.Fatalf("%s stream: %v", p.name, err)
				}
				ttfb[j] = append(ttfb[j], t)
				if got == frames && batched == 0 {
					stallFree[j]++
				}
			}
		}
		d50, d99 := pct(ttfb[0], 50), pct(ttfb[0], 99)
		for j := range board.Lanes {
			l := &board.Lanes[j]
			l.Streams = streams
			l.AddedTTFTP50us, l.AddedTTFTP99us = us(pct(ttfb[j+1], 50)-d50), us(pct(ttfb[j+1], 99)-d99)
			l.StallFree = float64(stallFree[j+1]) / float64(streams)
			for name, ds := range timings[j+1] {
				if l.ServerTimingP50us == nil {
					l.ServerTimingP50us = map[string]float64{}
				}
				l.ServerTimingP50us[name] = us(pct(ds, 50))
			}
		}
		g, p := board.Lanes[1], board.Lanes[0]
		board.Ratios = map[string]float64{}
		board.Goals = map[string]string{}
		for _, bound := range frontierBounds {
			k := frontierKey(bound)
			if p.Frontier[k] > 0 {
				board.Ratios["frontier "+k] = g.Frontier[k] / p.Frontier[k]
			}
			board.Goals["frontier "+k+" >= 1.0x the bare proxy's"] = frontierGoal(g.Frontier[k], p.Frontier[k])
		}
		ttft := g.AddedTTFTP50us - p.AddedTTFTP50us
		board.Ratios["added TTFT p50 minus the bare proxy's, µs"] = ttft
		board.Goals["added TTFT p50 <= the bare proxy's + 100 µs"] = met(ttft <= 100)
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(board); err != nil {
			b.Fatal(err)
		}
		out := bytes.TrimSpace(buf.Bytes())
		path := os.Getenv("SVC_BENCH_JSON")
		if path == "" {
			path = "governed-board.json"
		}
		if err := os.WriteFile(path, append(out, '\n'), 0o644); err != nil {
			b.Fatal(err)
		}
		fmt.Printf("%s\n", out)
	}
}

type governedBoard struct {
	Load       string             `json:"load"`
	GOMAXPROCS int                `json:"gomaxprocs"`
	NumCPU     int                `json:"numCPU"`
	Governance []string           `json:"governance"`
	Lanes      []governedLane     `json:"lanes"` // the bare proxy, then the governed gateway
	Ratios     map[string]float64 `json:"ratios"`
	Goals      map[string]string  `json:"goals"` // "met", "missed" or "not measured"
}

// profileGateway writes the gateway's CPU profile over the next d to
// SVC_BENCH_CPUPROFILE, when set (a profile of the governed request path
// under the sweep); the channel yields once it is written.
func (r *report) profileGateway(d time.Duration) <-chan error {
	done := make(chan error, 1)
	path := os.Getenv("SVC_BENCH_CPUPROFILE")
	if path == "" {
		done <- nil
		return done
	}
	go func() {
		resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", r.pprof, max(int(d.Seconds()), 1)))
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err == nil {
			err = os.WriteFile(path, raw, 0o644)
		}
		done <- err
	}()
	return done
}

// frontierBounds are the p99 bounds of the throughput frontier.
var frontierBounds = []time.Duration{time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond}

func frontierKey(bound time.Duration) string { return fmt.Sprintf("p99<=%dms", bound/time.Millisecond) }

// frontier is the most req/s of a sweep's levels whose p99 is within
// bound (0: none is).
func frontier(sweep []sweepPoint, bound time.Duration) float64 {
	best := 0.0
	for _, pt := range sweep {
		if pt.P99us <= us(bound) && pt.RPS > best {
			best = pt.RPS
		}
	}
	return best
}

// frontierGoal compares the gateway's frontier at one bound with the bare
// proxy's: with no level of either lane within the bound there is nothing
// to compare; a gateway within it where the bare proxy is not meets it.
func frontierGoal(gateway, bare float64) string {
	if gateway == 0 && bare == 0 {
		return "not measured"
	}
	return met(gateway >= bare)
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

type governedLane struct {
	Name           string             `json:"name"`
	AddedP50us     float64            `json:"addedP50us"`
	AddedP99us     float64            `json:"addedP99us"`
	Sweep          []sweepPoint       `json:"sweep"`
	Frontier       map[string]float64 `json:"frontierRPS"`
	Streams        int                `json:"streams"`
	AddedTTFTP50us float64            `json:"addedTTFTP50us"`
	AddedTTFTP99us float64            `json:"addedTTFTP99us"`
	StallFree      float64            `json:"stallFreeShare"`
	// ServerTimingP50us: the gateway's own account of its streams
	// (X-Svc-Overhead-Duration-Ms and the Server-Timing phases: auth,
	// admit, upstream), p50.
	ServerTimingP50us map[string]float64 `json:"serverTimingP50us,omitempty"`
}

type sweepPoint struct {
	Clients int     `json:"clients"`
	RPS     float64 `json:"rps"`
	P99us   float64 `json:"p99us"`
}
