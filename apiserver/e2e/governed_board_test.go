package e2e

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

// The governed board's pure helpers (governed_bench_test.go,
// governed_sweep_test.go, governed_cpu_test.go): no binary, no database.

func TestFrontier(t *testing.T) {
	sweep := []sweepPoint{
		{Clients: 1, RPS: 1000, P99us: 900},
		{Clients: 2, RPS: 1800, P99us: 1000},
		{Clients: 4, RPS: 3000, P99us: 4000},
		{Clients: 8, RPS: 2500, P99us: 4500}, // within 5 ms but fewer req/s than c=4
		{Clients: 16, RPS: 5000, P99us: 12000},
		{Clients: 32, RPS: 0, P99us: 0}, // every request failed: no figure
	}
	for _, tc := range []struct {
		bound time.Duration
		want  float64
	}{
		{500 * time.Microsecond, 0},
		{time.Millisecond, 1800}, // a p99 equal to the bound is within it
		{5 * time.Millisecond, 3000},
		{10 * time.Millisecond, 3000},
		{50 * time.Millisecond, 5000},
	} {
		if got := frontier(sweep, tc.bound); got != tc.want {
			t.Errorf("frontier(%v) = %v, want %v", tc.bound, got, tc.want)
		}
	}
	if got := frontier(nil, time.Second); got != 0 {
		t.Errorf("frontier of no sweep = %v, want 0", got)
	}
}

func TestFrontierGoal(t *testing.T) {
	for _, tc := range []struct {
		gateway, bare float64
		want          string
	}{
		{0, 0, "not measured"},
		{100, 0, "met"},
		{0, 100, "missed"},
		{99, 100, "missed"},
		{100, 100, "met"},
	} {
		if got := frontierGoal(tc.gateway, tc.bare); got != tc.want {
			t.Errorf("frontierGoal(%v, %v) = %q, want %q", tc.gateway, tc.bare, got, tc.want)
		}
	}
}

func ms(n ...int) []time.Duration {
	var d []time.Duration
	for _, v := range n {
		d = append(d, time.Duration(v)*time.Millisecond)
	}
	return d
}

func TestPooledPoint(t *testing.T) {
	for _, tc := range []struct {
		name string
		runs []levelRun
		want sweepPoint
	}{
		{"one run", []levelRun{{lat: ms(1, 2, 3, 4), elapsed: 2 * time.Second}},
			sweepPoint{Clients: 4, RPS: 2, P50us: 2000, P99us: 3000, Requests: 4, P99usRuns: []float64{3000}}},
		{"repeats pooled: req/s over both runs' time, p99 of all latencies", []levelRun{
			{lat: ms(1, 1, 1, 1, 1, 1, 1, 1, 1, 1), elapsed: time.Second},
			{lat: ms(2, 2, 2, 2, 2, 2, 2, 2, 2, 9), elapsed: 4 * time.Second},
		}, sweepPoint{Clients: 4, RPS: 4, P50us: 1000, P99us: 2000, Requests: 20, P99usRuns: []float64{1000, 2000}}},
		{"a run without requests counts its time", []levelRun{
			{lat: ms(5, 5), elapsed: time.Second},
			{elapsed: time.Second},
		}, sweepPoint{Clients: 4, RPS: 1, P50us: 5000, P99us: 5000, Requests: 2, P99usRuns: []float64{5000, 0}}},
		{"no requests at all", []levelRun{{elapsed: time.Second}},
			sweepPoint{Clients: 4, P99usRuns: []float64{0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pooledPoint(4, tc.runs); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("pooledPoint = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestLaneOrder(t *testing.T) {
	// Each lane first as often as second over two repeats at every level,
	// and from level to level within a repeat.
	for level := range sweepLevels {
		first := map[int]int{}
		for rep := range 2 {
			o := laneOrder(level, rep)
			if o[0] == o[1] || !slices.Contains(o[:], 0) || !slices.Contains(o[:], 1) {
				t.Fatalf("laneOrder(%d, %d) = %v: not both lanes", level, rep, o)
			}
			first[o[0]]++
			if next := laneOrder(level+1, rep); next[0] == o[0] {
				t.Errorf("levels %d and %d of repeat %d start with the same lane %d", level, level+1, rep, o[0])
			}
		}
		if first[0] != 1 || first[1] != 1 {
			t.Errorf("level %d: lanes first %v times over two repeats, want once each", level, first)
		}
	}
}

func TestParseParts(t *testing.T) {
	all := map[string]bool{"latency": true, "sweep": true, "cpu": true, "streams": true}
	for _, tc := range []struct {
		in      string
		want    map[string]bool
		wantErr bool
	}{
		{"", all, false},
		{" , ", all, false},
		{"streams", map[string]bool{"streams": true}, false},
		{"latency, sweep,cpu", map[string]bool{"latency": true, "sweep": true, "cpu": true}, false},
		{"stream", nil, true},
		{"sweep,memory", nil, true},
	} {
		got, err := parseParts(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("parseParts(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if !tc.wantErr && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseParts(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestParseProcStat(t *testing.T) {
	tail := " 4242 4242 0 -1 4194560 1200 0 0 0 1234 56 78 9 20 0 1 0 777 1000000 500 18446744073709551615"
	for _, tc := range []struct {
		name    string
		raw     string
		want    procStat
		wantErr bool
	}{
		{"postgres backend", "4300 (postgres) S 4242" + tail,
			procStat{comm: "postgres", ppid: 4242, cpu: (1234 + 56) * clockTick, children: (78 + 9) * clockTick}, false},
		{"a name with spaces and parentheses", "7 (a (b) c) R 1" + tail,
			procStat{comm: "a (b) c", ppid: 1, cpu: (1234 + 56) * clockTick, children: (78 + 9) * clockTick}, false},
		{"no command name", "7 postgres S 1" + tail, procStat{}, true},
		{"cut short", "7 (postgres) S 1 2 3", procStat{}, true},
		{"not a number", "7 (postgres) S 1 4242 4242 0 -1 4194560 1200 0 0 0 x 56 78 9 20 0", procStat{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcStat([]byte(tc.raw))
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want error %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("parseProcStat = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestBackendsDelta(t *testing.T) {
	before := map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: time.Second}
	after := map[int]time.Duration{
		1: 3 * time.Second,        // +2 s
		2: 2 * time.Second,        // idle
		4: 500 * time.Millisecond, // started within the window: whole
	} // 3 ended: not seen
	if got, want := backendsDelta(before, after), 2500*time.Millisecond; got != want {
		t.Errorf("backendsDelta = %v, want %v", got, want)
	}
}

func TestCPUUsageLane(t *testing.T) {
	var u cpuUsage
	u.add(cpuCounters{serving: time.Second, server: 10 * time.Second, backends: map[int]time.Duration{9: time.Second}, bench: 5 * time.Second},
		cpuCounters{serving: 1200 * time.Millisecond, server: 10100 * time.Millisecond, backends: map[int]time.Duration{9: 1080 * time.Millisecond}, bench: 5300 * time.Millisecond},
		1000, 2*time.Second)
	u.add(cpuCounters{}, cpuCounters{serving: 200 * time.Millisecond, server: 100 * time.Millisecond, bench: 300 * time.Millisecond},
		1000, 2*time.Second)
	got := u.lane(16, "pg")
	want := laneCPU{Clients: 16, Seconds: 4, Requests: 2000, ServingUsPerReq: 200, PostgresUsPerReq: 100,
		PostgresDatabaseUsPerReq: 40, BenchUsPerReq: 300, TotalUsPerReq: 600, Postgres: "pg"}
	if got != want {
		t.Errorf("lane = %+v, want %+v", got, want)
	}
	if got := (cpuUsage{}).lane(16, "pg"); got.TotalUsPerReq != 0 || got.Requests != 0 {
		t.Errorf("no requests: %+v, want zero figures", got)
	}
}

func TestBoardGoals(t *testing.T) {
	lanes := func(bareTTFT, gwTTFT float64) []governedLane {
		return []governedLane{
			{Frontier: map[string]float64{"p99<=5ms": 1000}, AddedTTFTP50us: bareTTFT, CPU: &laneCPU{TotalUsPerReq: 400}},
			{Frontier: map[string]float64{"p99<=5ms": 900}, AddedTTFTP50us: gwTTFT, CPU: &laneCPU{TotalUsPerReq: 500}},
		}
	}
	all, _ := parseParts("")
	ratios, goals := boardGoals(governedBoard{Lanes: lanes(500, 550)}, all)
	wantGoals := map[string]string{
		"frontier p99<=1ms >= 1.0x the bare proxy's":  "not measured",
		"frontier p99<=5ms >= 1.0x the bare proxy's":  "missed",
		"frontier p99<=10ms >= 1.0x the bare proxy's": "not measured",
		"frontier p99<=50ms >= 1.0x the bare proxy's": "not measured",
		"added TTFT p50 <= the bare proxy's + 100 µs": "met",
	}
	if !reflect.DeepEqual(goals, wantGoals) {
		t.Errorf("goals = %v, want %v", goals, wantGoals)
	}
	for k, want := range map[string]float64{
		"frontier p99<=5ms":                                  0.9,
		"added TTFT p50 minus the bare proxy's, µs":          50,
		"CPU per request, total, over the bare proxy's":      1.25,
		"CPU per request, total, minus the bare proxy's, µs": 100,
	} {
		if ratios[k] != want {
			t.Errorf("ratio %q = %v, want %v", k, ratios[k], want)
		}
	}
	onlySweep, _ := parseParts("sweep")
	_, goals = boardGoals(governedBoard{Lanes: lanes(500, 700)}, onlySweep)
	if got := goals["added TTFT p50 <= the bare proxy's + 100 µs"]; got != "not measured" {
		t.Errorf("streams not run: TTFT goal %q, want not measured", got)
	}
}
