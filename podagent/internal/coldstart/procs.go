package coldstart

import (
	"os"
	"runtime"
	"sync"
)

// Restoring a workspace is mostly system calls: one openat, write and close
// per file of node_modules and of the work tree. A thread inside one still
// holds its P (the runtime's right to run Go code) until the runtime takes
// it back, so on a busy node, where the kernel deschedules threads in the
// middle of those calls, one P per core leaves the download, the inflate
// and the writers waiting for a P whose thread is not running. Cold start
// therefore runs with twice the Ps (at least 4) and gives them back when it
// ends; the work done is the same.
var procs struct {
	sync.Mutex
	active int // cold starts running
	saved  int // GOMAXPROCS before the first of them
}

// widenProcs raises GOMAXPROCS for a cold start; the returned func undoes
// it once the last concurrent cold start has ended.
func widenProcs() func() {
	procs.Lock()
	defer procs.Unlock()
	if procs.active == 0 {
		procs.saved = runtime.GOMAXPROCS(0)
		runtime.GOMAXPROCS(max(4, 2*procs.saved))
	}
	procs.active++
	return func() {
		procs.Lock()
		defer procs.Unlock()
		if procs.active--; procs.active > 0 {
			return
		}
		if os.Getenv("GOMAXPROCS") == "" {
			runtime.SetDefaultGOMAXPROCS() // keeps following the CPU limit
		} else {
			runtime.GOMAXPROCS(procs.saved)
		}
	}
}
