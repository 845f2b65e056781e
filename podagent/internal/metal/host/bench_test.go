package host_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/svc-dev/svc/podagent/internal/metal/host"
	"github.com/svc-dev/svc/shared/wire"
)

// Micro-VM figures (docs/performance.md): a guest's
// boot to a ready agent (no archives), the cold boot of a seeded workspace
// through the host (hydrate, disk, boot, swap), the resume of a snapshot,
// the export every interval for an idle and a busy project, and the memory
// of an idle guest (QEMU's RSS, reported as rss-MB).
func BenchmarkGuest(b *testing.B) {
	const token = "svc_rt_bench.test"
	ctx := context.Background()
	b.Run("BootEmpty", func(b *testing.B) {
		w := newWorld(b, "prj_bench_empty", token, false, nil)
		var rss float64
		for i := 0; i < b.N; i++ {
			st, err := w.h.Ensure(ctx, "prj_bench_empty", token)
			must(b, err)
			b.StopTimer()
			rss += rssMB(b, st.PID)
			must(b, w.h.Discard(ctx, "prj_bench_empty", "bench"))
			w.waitStopped(b, "prj_bench_empty", host.StateRescued)
			b.StartTimer()
		}
		b.ReportMetric(rss/float64(b.N), "rss-MB")
	})
	b.Run("ColdBootWorkspace", func(b *testing.B) {
		const project = "prj_bench_cold"
		w := newWorld(b, project, token, false, nil)
		seed(b, w.store, project)
		for i := 0; i < b.N; i++ {
			_, err := w.h.Ensure(ctx, project, token)
			must(b, err)
			b.StopTimer()
			must(b, w.h.Discard(ctx, project, "bench"))
			w.waitStopped(b, project, host.StateRescued)
			b.StartTimer()
		}
	})
	b.Run("ResumeSnapshot", func(b *testing.B) {
		const project = "prj_bench_snap"
		w := newWorld(b, project, token, true, nil)
		_, err := w.h.Ensure(ctx, project, token)
		must(b, err)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			_, err := w.h.Stop(ctx, project, wire.MetalStopSuspend)
			must(b, err)
			w.waitStopped(b, project, host.StateSuspended)
			b.StartTimer()
			st, err := w.h.Ensure(ctx, project, token)
			must(b, err)
			if st.BootKind != "snapshot" {
				b.Fatalf("boot kind %s", st.BootKind)
			}
		}
	})
	b.Run("Export", func(b *testing.B) {
		const project = "prj_bench_export"
		w := newWorld(b, project, token, false, nil)
		st, err := w.h.Ensure(ctx, project, token)
		must(b, err)
		b.Run("idle", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				must(b, w.h.Export(ctx, project, false))
			}
		})
		// Busy: a turn wrote a 256 KiB file since the last export.
		big := strings.Repeat("busy project line of text\n", 10<<10)
		b.Run("busy", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				w.turn(b, st, token, "gen/"+strconv.Itoa(i)+".txt", big)
				b.StartTimer()
				must(b, w.h.Export(ctx, project, false))
			}
		})
	})
}

// rssMB is a process's resident memory.
func rssMB(b *testing.B, pid int) float64 {
	b.Helper()
	s, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	must(b, err)
	for _, line := range strings.Split(string(s), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			must(b, err)
			return float64(kb) / 1024
		}
	}
	b.Fatal("no VmRSS")
	return 0
}
