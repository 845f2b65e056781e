package coldstart

import (
	"runtime"
	"testing"
)

// Not parallel: GOMAXPROCS is process-wide.
func TestWidenProcs(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	wide := max(4, 2*before)
	undoA := widenProcs()
	if got := runtime.GOMAXPROCS(0); got != wide {
		t.Fatalf("during a cold start GOMAXPROCS = %d, want %d", got, wide)
	}
	undoB := widenProcs() // a second cold start at the same time
	if got := runtime.GOMAXPROCS(0); got != wide {
		t.Fatalf("two cold starts: GOMAXPROCS = %d, want %d", got, wide)
	}
	undoA()
	if got := runtime.GOMAXPROCS(0); got != wide {
		t.Fatalf("one of two cold starts ended: GOMAXPROCS = %d, want still %d", got, wide)
	}
	undoB()
	if got := runtime.GOMAXPROCS(0); got != before {
		t.Fatalf("after the cold starts GOMAXPROCS = %d, want %d back", got, before)
	}
}
