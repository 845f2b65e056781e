package e2e

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The governed board's sweep (governed_bench_test.go): the levels, one run
// of a level on one lane, and the runs of a level pooled into one point.

// sweepLevels are the board's concurrency levels: fine enough that the
// last level within a p99 bound moves the frontier by a step of at most
// half, as the public boards sweep.
var sweepLevels = []int{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128}

// governedParts are the parts of the board a run can do (SVC_BENCH_PARTS).
var governedParts = []string{"latency", "sweep", "cpu", "streams"}

// parseParts reads SVC_BENCH_PARTS: a comma list of governedParts; empty
// means every part.
func parseParts(s string) (map[string]bool, error) {
	on := map[string]bool{}
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !slices.Contains(governedParts, p) {
			return nil, fmt.Errorf("SVC_BENCH_PARTS: unknown part %q (parts: %s)", p, strings.Join(governedParts, ","))
		}
		on[p] = true
	}
	if len(on) == 0 {
		for _, p := range governedParts {
			on[p] = true
		}
	}
	return on, nil
}

// laneOrder is the order in which the two lanes (0: the bare proxy, 1: the
// gateway) run a level in one repeat: alternating from level to level and
// mirrored from one repeat to the next, so that each lane runs first as
// often as second (with an even number of repeats, at every level) and
// neither inherits the other's after-effects (its connections' churn, the
// gateway's deferred writes) more often.
func laneOrder(level, repeat int) [2]int {
	if (level+repeat)%2 == 0 {
		return [2]int{0, 1}
	}
	return [2]int{1, 0}
}

// levelRun is one run of one level on one lane: the latencies of the
// requests timed and how long they took together.
type levelRun struct {
	lat     []time.Duration
	elapsed time.Duration
	warm    int // requests sent before the timing started (one per client)
}

// loadRun runs clients sending plain completions: each first sends one
// request that is not timed (so that every client has its connection
// before the level starts: no level's p99 holds a connection's set-up),
// then, all together, as many as they can for d.
func (p benchPath) loadRun(b *testing.B, clients int, d time.Duration) levelRun {
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	var deadline time.Time // written before start is closed
	lat := make([][]time.Duration, clients)
	var failed, warm atomic.Int64
	var firstErr atomic.Value // the first failure's error, for the report
	for c := range clients {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			if _, err := p.do(p.body); err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			} else {
				warm.Add(1)
			}
			ready.Done()
			<-start
			for time.Now().Before(deadline) {
				l, err := p.do(p.body)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				lat[c] = append(lat[c], l)
			}
		}()
	}
	ready.Wait()
	t0 := time.Now()
	deadline = t0.Add(d)
	close(start)
	done.Wait()
	run := levelRun{elapsed: time.Since(t0), warm: int(warm.Load())}
	for _, l := range lat {
		run.lat = append(run.lat, l...)
	}
	if n := failed.Load(); n > 0 {
		b.Errorf("%s: %d requests failed at %d clients (the first: %v)", p.name, n, clients, firstErr.Load())
	}
	return run
}

// pooledPoint is one level's point of a lane's sweep from its repeats:
// the latencies pooled (the p50 and p99 of all of them), req/s as all the
// requests over all the runs' time; P99usRuns keeps each run's own p99.
func pooledPoint(clients int, runs []levelRun) sweepPoint {
	pt := sweepPoint{Clients: clients}
	var all []time.Duration
	var elapsed time.Duration
	for _, r := range runs {
		all = append(all, r.lat...)
		elapsed += r.elapsed
		p99 := 0.0
		if len(r.lat) > 0 {
			p99 = us(pct(r.lat, 99))
		}
		pt.P99usRuns = append(pt.P99usRuns, p99)
	}
	pt.Requests = len(all)
	if len(all) == 0 || elapsed <= 0 {
		return pt
	}
	pt.RPS = float64(len(all)) / elapsed.Seconds()
	pt.P50us, pt.P99us = us(pct(all, 50)), us(pct(all, 99))
	return pt
}
