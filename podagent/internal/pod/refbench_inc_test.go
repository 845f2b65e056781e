package pod

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/repoarchive"
)

// BenchmarkColdStartReferenceIncrements: BenchmarkColdStartReference with
// K = 0, 8 and 32 one-file turns persisted as increments over the base
// (docs/sync-modes.md §13), everything else identical: same reference
// workspace, same pod cold start, same floor (the base and the deps layer
// alone, as today's). The K=8/K=0 and K=32/K=0 ratios of pod-ms (or of
// pod/floor, less sensitive to a drift between sub-benchmarks) come from
// one run. The state is built before each K's sub-benchmarks, so any
// selection of them measures the right chain.
func BenchmarkColdStartReferenceIncrements(b *testing.B) {
	store := benchStore(b)
	const project = "refbench-inc"
	roots := workspaceRoots(b)
	referenceObjectsIn(b, store, project, 0, roots[0].dir)
	var trees []string
	b.Cleanup(func() {
		for _, t := range trees {
			os.RemoveAll(t)
		}
	})
	keep := func(dir string) {
		if removeEach() {
			os.RemoveAll(dir)
			return
		}
		trees = append(trees, dir)
	}
	// The writer: a pod on a tree of its own (on tmpfs, see removeEach),
	// started for each batch of turns and closed before the measured cold
	// starts take the project over.
	_, writerTree := coldStartOnce(b, store, project, roots[0].dir)
	keep(writerTree)
	ctx := context.Background()
	n := 0
	write := func(k int, compact bool) {
		cfg := testConfig(project, writerTree, "")
		cfg.DurableMaxIncrements = -1 // the chain stays as built
		w, err := Start(ctx, Options{Config: cfg, Store: store, Log: zap.NewNop()})
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		if compact {
			if err := w.Durable.Compact(ctx); err != nil {
				b.Fatal(err)
			}
		}
		for i := 0; i < k; i++ {
			n++
			if err := os.WriteFile(filepath.Join(writerTree, "src", fmt.Sprintf("pending-%d.ts", n)), []byte(fmt.Sprintf("export const n = %d;\n", n)), 0o644); err != nil {
				b.Fatal(err)
			}
			if _, err := w.Turn(ctx, "bench pending turn"); err != nil {
				b.Fatal(err)
			}
			w.Sync.WaitBackground()
		}
	}
	pending := func() int {
		man, _, err := repoarchive.GetManifest(ctx, store, project)
		if err != nil {
			b.Fatal(err)
		}
		return len(man.Increments)
	}
	have := 0
	for _, k := range []int{0, 8, 32} {
		write(k-have, have == 0)
		have = k
		if got := pending(); got != k {
			b.Fatalf("%d increments pending, want %d", got, k)
		}
		for _, root := range roots {
			b.Run(fmt.Sprintf("K=%d/%s", k, root.name), func(b *testing.B) {
				coldStartVsFloor(b, store, project, fmt.Sprintf("K=%d %s", k, root.name), root.dir, keep)
				// A cold start persists nothing: every run read the same chain.
				if got := pending(); got != k {
					b.Fatalf("%d increments pending after the cold starts, want %d", got, k)
				}
			})
		}
	}
}
