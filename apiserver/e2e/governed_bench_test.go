package e2e

import (
	"bytes"
	"database/sql"
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
//  1. latency: added latency at one client: p50 and p99 minus the
//     direct-to-mock figures;
//  2. sweep: the throughput frontier: from a concurrency sweep over
//     sweepLevels, each level run on both lanes in alternating order and
//     repeated, the most req/s whose pooled p99 stays within 1, 5, 10 and
//     50 ms;
//  3. cpu: CPU time per request of the serving process, PostgreSQL and the
//     benchmark process at one level (SVC_BENCH_CPU_CLIENTS, default 16);
//  4. streams: added time to the first token (p50, p99) with the lanes
//     alternating, and again right after a plain request on the same lane
//     (back to back); stall-free streams (every frame received, none
//     batched behind a stall).
//
// The raw figures are written as JSON to SVC_BENCH_JSON (default
// governed-board.json in the working directory). Publish only a run on a
// quiet machine (load < 1.5), e.g.:
//
//	make build && cd apiserver && SVC_BIN_DIR=$PWD/../bin SVC_BENCH_JSON=$PWD/../docs/bench/governed-board.json \
//	  GOWORK=off go test -run '^$' -bench BenchmarkGovernedBoard -benchtime 1x -timeout 30m ./e2e/
//
// Environment as BenchmarkGatewayReport's (SVC_BENCH_REQUESTS,
// SVC_BENCH_DURATION: one lane's run of one sweep level, SVC_BENCH_FRAMES,
// SVC_BENCH_FRAME_GAP), and SVC_BENCH_PARTS (a comma list of latency,
// sweep, cpu, streams; default all), SVC_BENCH_SWEEP_REPEATS (runs of each
// level per lane, pooled; default 2; also the CPU part's windows per lane),
// SVC_BENCH_CPU_CLIENTS (default 16), SVC_BENCH_CPUPROFILE and
// SVC_BENCH_STREAMS_CPUPROFILE: files for the gateway's CPU profile over the
// sweep and over the streams part's first 30 s, SVC_BENCH_BARE_PROXY_TIMING=1:
// the bare proxy sends the gateway's timing headers (runBareProxy),
// SVC_BENCH_BARE_PROXY_HEADERS=governed: a header block of the gateway's
// shape and size (governedHeaders).
func BenchmarkGovernedBoard(b *testing.B) {
	began := time.Now()
	parts, err := parseParts(os.Getenv("SVC_BENCH_PARTS"))
	if err != nil {
		b.Fatal(err)
	}
	repeats := envInt("SVC_BENCH_SWEEP_REPEATS", 2)
	cpuClients := envInt("SVC_BENCH_CPU_CLIENTS", 16)
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
	settleKeyBudget(b, gw, r.env.dbURL, r.acc.keyID)
	gap := envDuration("SVC_BENCH_FRAME_GAP", 2*time.Millisecond)
	frames := envInt("SVC_BENCH_FRAMES", 8)
	setup := time.Since(began)
	for i := 0; i < b.N; i++ {
		board := governedBoard{Load: loadAvg(), GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU(),
			Governance: []string{"api key", "key budget (reserve + settle)", "plan rate limits", "usage windows", "usage metering", "metrics"},
			Seconds:    map[string]float64{"setup": setup.Seconds()}}
		for _, p := range governedParts {
			if parts[p] {
				board.Parts = append(board.Parts, p)
			}
		}
		paths := []benchPath{r.direct, bare, gw}
		lanes := [2]benchPath{bare, gw}
		for _, p := range lanes {
			board.Lanes = append(board.Lanes, governedLane{Name: p.name, Frontier: map[string]float64{}})
		}
		timed := func(part string, run func()) {
			if !parts[part] {
				return
			}
			t0 := time.Now()
			run()
			board.Seconds[part] = time.Since(t0).Seconds()
		}
		// 1. c=1, interleaved rounds.
		timed("latency", func() {
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
			for j := range board.Lanes {
				board.Lanes[j].AddedP50us, board.Lanes[j].AddedP99us = us(pct(lat[j+1], 50)-dp50), us(pct(lat[j+1], 99)-dp99)
			}
		})
		// 2. the sweep: each level on both lanes (their order alternating),
		// the whole sweep repeated, the repeats' latencies pooled per level
		// and lane.
		timed("sweep", func() {
			board.SweepLevelSeconds, board.SweepRepeats = r.duration.Seconds(), repeats
			profiled := r.profileGateway(os.Getenv("SVC_BENCH_CPUPROFILE"), time.Duration(2*len(sweepLevels)*repeats)*r.duration)
			runs := [2][][]levelRun{make([][]levelRun, len(sweepLevels)), make([][]levelRun, len(sweepLevels))}
			for rep := range repeats {
				for l, c := range sweepLevels {
					for _, j := range laneOrder(l, rep) {
						runs[j][l] = append(runs[j][l], lanes[j].loadRun(b, c, r.duration))
					}
				}
			}
			if err := <-profiled; err != nil {
				b.Fatal(err)
			}
			for j := range board.Lanes {
				for l, c := range sweepLevels {
					board.Lanes[j].Sweep = append(board.Lanes[j].Sweep, pooledPoint(c, runs[j][l]))
				}
				for _, bound := range frontierBounds {
					board.Lanes[j].Frontier[frontierKey(bound)] = frontier(board.Lanes[j].Sweep, bound)
				}
			}
		})
		// 3. CPU per request at one level.
		timed("cpu", func() {
			cpu, idle := measureCPU(b, lanes, r.env.dbURL, cpuClients, repeats, r.duration, cpuTail)
			board.CPUIdle = &idle
			for j := range board.Lanes {
				board.Lanes[j].CPU = &cpu[j]
			}
		})
		// 4. streams: the lanes alternating (each lane's previous request
		// is two other lanes' streams ago), then the same again right after
		// a plain request on the same lane (back to back).
		timed("streams", func() {
			profiled := r.profileGateway(os.Getenv("SVC_BENCH_STREAMS_CPUPROFILE"), streamsProfile)
			defer func() {
				if err := <-profiled; err != nil {
					b.Fatal(err)
				}
			}()
			var ttfb, warm [3][]time.Duration
			stallFree := [3]int{}
			timings := [3]map[string][]time.Duration{{}, {}, {}}
			warmTimings := [3]map[string][]time.Duration{{}, {}, {}}
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
				for j, p := range paths {
					if _, err := p.do(p.body); err != nil {
						b.Fatalf("%s: %v", p.name, err)
					}
					t, _, _, err := p.streamOnce(gap, warmTimings[j])
					if err != nil {
						b.Fatalf("%s stream: %v", p.name, err)
					}
					warm[j] = append(warm[j], t)
				}
			}
			d50, d99 := pct(ttfb[0], 50), pct(ttfb[0], 99)
			w50, w99 := pct(warm[0], 50), pct(warm[0], 99)
			for j := range board.Lanes {
				l := &board.Lanes[j]
				l.Streams = streams
				l.AddedTTFTP50us, l.AddedTTFTP99us = us(pct(ttfb[j+1], 50)-d50), us(pct(ttfb[j+1], 99)-d99)
				l.AddedTTFTWarmP50us, l.AddedTTFTWarmP99us = us(pct(warm[j+1], 50)-w50), us(pct(warm[j+1], 99)-w99)
				l.StallFree = float64(stallFree[j+1]) / float64(streams)
				l.ServerTimingP50us = timingP50s(timings[j+1])
				l.ServerTimingWarmP50us = timingP50s(warmTimings[j+1])
			}
		})
		board.Seconds["total"] = time.Since(began).Seconds()
		board.LoadAfter = loadAvg()
		board.Ratios, board.Goals = boardGoals(board, parts)
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
		fmt.Printf("governed board: run time %s (", time.Since(began).Round(time.Second))
		fmt.Printf("setup %.0f s", setup.Seconds())
		for _, p := range board.Parts {
			fmt.Printf(", %s %.0f s", p, board.Seconds[p])
		}
		fmt.Printf(")\n")
	}
}

// settleKeyBudget sends the gateway's requests one at a time until the
// key's budget has settled a request's cost (its largest request cost is
// known): until then the gateway admits a budgeted key's requests one at a
// time (docs/gateway.md, Budgets per API key), which any part that starts
// with many clients would meet as 429s. It also waits out the
// authentication cache that held the key without its budget.
func settleKeyBudget(b *testing.B, gw benchPath, dbURL, keyID string) {
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := gw.do(gw.body); err != nil {
			b.Fatalf("%s: %v", gw.name, err)
		}
		var largest int64
		if err := db.QueryRow(`SELECT max_request_micro FROM key_budgets WHERE key_id = $1`, keyID).Scan(&largest); err != nil {
			b.Fatalf("the key's budget: %v", err)
		}
		if largest > 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatal("the key's budget settled no request's cost in 30 s")
		}
	}
}

// cpuTail is how long the CPU part keeps counting after a window's last
// request: past the gateway's deferred writes (usage batches within
// 20 ms, leased settlements within 100 ms).
const cpuTail = 250 * time.Millisecond

// timingP50s is the p50 of each Server-Timing phase (nil: none).
func timingP50s(timings map[string][]time.Duration) map[string]float64 {
	var p50 map[string]float64
	for name, ds := range timings {
		if p50 == nil {
			p50 = map[string]float64{}
		}
		p50[name] = us(pct(ds, 50))
	}
	return p50
}

// boardGoals are the gateway's figures beside the bare proxy's (the first
// lane): ratios and differences, and whether each goal was met; a goal of
// a part not run is "not measured".
func boardGoals(board governedBoard, parts map[string]bool) (map[string]float64, map[string]string) {
	ratios, goals := map[string]float64{}, map[string]string{}
	g, p := board.Lanes[1], board.Lanes[0]
	for _, bound := range frontierBounds {
		k := frontierKey(bound)
		if p.Frontier[k] > 0 {
			ratios["frontier "+k] = g.Frontier[k] / p.Frontier[k]
		}
		goals["frontier "+k+" >= 1.0x the bare proxy's"] = frontierGoal(g.Frontier[k], p.Frontier[k])
	}
	const ttftGoal = "added TTFT p50 <= the bare proxy's + 100 µs"
	if parts["streams"] {
		ttft := g.AddedTTFTP50us - p.AddedTTFTP50us
		ratios["added TTFT p50 minus the bare proxy's, µs"] = ttft
		ratios["added TTFT back to back p50 minus the bare proxy's, µs"] = g.AddedTTFTWarmP50us - p.AddedTTFTWarmP50us
		goals[ttftGoal] = met(ttft <= 100)
	} else {
		goals[ttftGoal] = "not measured"
	}
	if g.CPU != nil && p.CPU != nil && p.CPU.TotalUsPerReq > 0 {
		ratios["CPU per request, total, over the bare proxy's"] = g.CPU.TotalUsPerReq / p.CPU.TotalUsPerReq
		ratios["CPU per request, total, minus the bare proxy's, µs"] = g.CPU.TotalUsPerReq - p.CPU.TotalUsPerReq
	}
	return ratios, goals
}

type governedBoard struct {
	Load       string             `json:"load"`
	GOMAXPROCS int                `json:"gomaxprocs"`
	NumCPU     int                `json:"numCPU"`
	Governance []string           `json:"governance"`
	Lanes      []governedLane     `json:"lanes"` // the bare proxy, then the governed gateway
	Ratios     map[string]float64 `json:"ratios"`
	Goals      map[string]string  `json:"goals"` // "met", "missed" or "not measured"
	// Parts run (SVC_BENCH_PARTS); Seconds: the run time of each part, the
	// set-up and the total.
	Parts   []string           `json:"parts"`
	Seconds map[string]float64 `json:"seconds"`
	// SweepLevelSeconds: one lane's run of one level; SweepRepeats: runs of
	// each level per lane, pooled.
	SweepLevelSeconds float64 `json:"sweepLevelSeconds,omitempty"`
	SweepRepeats      int     `json:"sweepRepeats,omitempty"`
	LoadAfter         string  `json:"loadAfter"` // the load average at the end
	// CPUIdle: the cpu part's counters with no request (background rates).
	CPUIdle *idleCPU `json:"cpuIdle,omitempty"`
}

// streamsProfile is how long the streams part is profiled for
// SVC_BENCH_STREAMS_CPUPROFILE (the part runs about a minute at the default
// SVC_BENCH_REQUESTS).
const streamsProfile = 30 * time.Second

// profileGateway writes the gateway's CPU profile over the next d to path,
// when set (SVC_BENCH_CPUPROFILE: the governed request path under the
// sweep; SVC_BENCH_STREAMS_CPUPROFILE: streams one at a time); the channel
// yields once it is written.
func (r *report) profileGateway(path string, d time.Duration) <-chan error {
	done := make(chan error, 1)
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
	// AddedTTFTWarm…: the streams measured right after a plain request on
	// the same lane (back to back, no idle gap before them), minus the
	// direct stream's measured alike; ServerTimingWarmP50us their
	// Server-Timing.
	AddedTTFTWarmP50us    float64            `json:"addedTTFTWarmP50us"`
	AddedTTFTWarmP99us    float64            `json:"addedTTFTWarmP99us"`
	ServerTimingWarmP50us map[string]float64 `json:"serverTimingWarmP50us,omitempty"`
	// CPU: CPU time per request at one level (the cpu part).
	CPU *laneCPU `json:"cpu,omitempty"`
}

// sweepPoint is one level of a lane's sweep, its repeats pooled.
type sweepPoint struct {
	Clients   int       `json:"clients"`
	RPS       float64   `json:"rps"`
	P99us     float64   `json:"p99us"`
	P50us     float64   `json:"p50us"`
	Requests  int       `json:"requests"`
	P99usRuns []float64 `json:"p99usRuns"` // each repeat's own p99
}
