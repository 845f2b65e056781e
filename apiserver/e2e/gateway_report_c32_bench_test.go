package e2e

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// throughput: plain completions at 32 clients, every path once per round
// for SVC_BENCH_DURATION, in SVC_BENCH_C32_ROUNDS (default 5) interleaved
// rounds, so that the machine's drift touches each path alike. It prints
// the median req/s, the ratio to the bare proxy within each round (median,
// lowest, highest), and what a request cost: the serving process's CPU and
// the whole machine's (the load generator, the upstream, PostgreSQL and
// the kernel included; from /proc/stat).
func (r *report) throughput() {
	const clients = 32
	rounds := envInt("SVC_BENCH_C32_ROUNDS", 5)
	type cell struct {
		rps              []float64
		ratio            []float64
		procCPU, machCPU time.Duration
		requests         float64
	}
	res := make([]cell, len(r.paths))
	for round := 0; round < rounds; round++ {
		var bare float64
		for i, p := range r.paths {
			cpu0, mach0 := processCPU(r.b, p.pid), machineCPU(r.b)
			start := time.Now()
			rps, _ := p.load(r.b, clients, r.duration)
			secs := time.Since(start).Seconds()
			c := &res[i]
			c.procCPU += processCPU(r.b, p.pid) - cpu0
			c.machCPU += machineCPU(r.b) - mach0
			c.requests += rps * secs
			c.rps = append(c.rps, rps)
			if i == 0 {
				bare = rps
			}
			c.ratio = append(c.ratio, rps/bare)
		}
	}
	fmt.Printf("\n-- plain completions at %d clients, %d interleaved rounds of %v per path\n", clients, rounds, r.duration)
	fmt.Printf("%-44s %12s %22s %14s %15s\n", "path", "req/s p50", "ratio p50 (min–max)", "CPU µs/req", "machine µs/req")
	for i, p := range r.paths {
		c := res[i]
		ratios := sorted(c.ratio)
		fmt.Printf("%-44s %12.0f %22s %14.0f %15.0f\n", p.name, median(c.rps),
			fmt.Sprintf("%.2f× (%.2f–%.2f)", median(c.ratio), ratios[0], ratios[len(ratios)-1]),
			us(c.procCPU)/c.requests, us(c.machCPU)/c.requests)
	}
}

// machineCPU is the CPU time every core of the machine spent busy so far
// (the first line of /proc/stat, less idle and iowait).
func machineCPU(b *testing.B) time.Duration {
	raw, err := os.ReadFile("/proc/stat")
	must(b, err)
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	var busy int64
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			b.Fatalf("parsing /proc/stat: %q", line)
		}
		if i != 3 && i != 4 && i < 8 { // not idle, iowait; not guest (counted in user)
			busy += n
		}
	}
	return time.Duration(busy) * 10 * time.Millisecond
}

func sorted(v []float64) []float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s
}

func median(v []float64) float64 {
	s := sorted(v)
	return s[len(s)/2]
}
