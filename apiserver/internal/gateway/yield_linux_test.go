package gateway

import (
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"unsafe"
)

// pinToCPU0 binds the calling thread (locked by the caller) to CPU 0.
func pinToCPU0() error {
	var mask [16]uint64 // 1024 CPUs
	mask[0] = 1
	_, _, errno := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, unsafe.Sizeof(mask), uintptr(unsafe.Pointer(&mask)))
	if errno != 0 {
		return errno
	}
	return nil
}

// TestYieldCPUGivesTheCPUUp: a thread this one just woke on its own CPU
// (here by a write to a pipe it waits on) runs before yieldCPU returns, as
// the reader of a stream's first events does when it shares the CPUs. The
// scheduler decides, so the test counts rounds.
func TestYieldCPUGivesTheCPUUp(t *testing.T) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil { // blocking: a read waits in the kernel
		t.Fatal(err)
	}
	defer syscall.Close(p[1])
	var woke atomic.Int64
	ready := make(chan error, 1)
	go func() { // the woken thread: on CPU 0, counts its wake-ups
		defer syscall.Close(p[0])
		runtime.LockOSThread() // never unlocked: the pinned thread ends with its goroutine
		err := pinToCPU0()
		ready <- err
		var b [1]byte
		for err == nil {
			var n int
			if n, err = syscall.Read(p[0], b[:]); n == 1 {
				woke.Add(1)
			} else if err == nil {
				return // the write end closed
			}
		}
	}()
	if err := <-ready; err != nil {
		t.Skipf("cannot pin a thread to CPU 0: %v", err)
	}
	runtime.LockOSThread() // likewise
	if err := pinToCPU0(); err != nil {
		t.Skipf("cannot pin a thread to CPU 0: %v", err)
	}
	const rounds = 200
	late := 0
	for i := range rounds {
		for woke.Load() != int64(i) { // the previous wake-up counted: the reader waits again
			runtime.Gosched()
		}
		if _, err := syscall.Write(p[1], []byte{1}); err != nil {
			t.Fatal(err)
		}
		yieldCPU()
		if woke.Load() != int64(i+1) {
			late++
		}
	}
	// Without the yield, 6–8 % of rounds here find the woken thread not yet
	// run on a quiet machine (up to all of them with three busy processes on
	// two CPUs); with it none on a quiet machine and at most 1 % under that load.
	if late > rounds*3/100 {
		t.Errorf("in %d of %d rounds the thread woken on this CPU had not run when yieldCPU returned", late, rounds)
	}
}
