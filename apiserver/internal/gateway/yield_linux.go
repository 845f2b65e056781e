package gateway

import "syscall"

// yieldCPU gives the calling thread's CPU to another thread that is ready to
// run on it, if there is one (sched_yield(2)); with none it returns at once.
// It goes through syscall.Syscall, so Go's scheduler sees a system call.
func yieldCPU() { _, _, _ = syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
