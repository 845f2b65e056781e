package wire

import (
	"errors"
	"strings"
	"syscall"
)

// DiskFull reports whether err comes from a full disk: ENOSPC or EDQUOT
// from a system call, or the message a child process (git) printed for
// one. Such an error is answered 507 insufficient_storage naming the disk,
// so an operator knows what to free.
func DiskFull(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	s := err.Error()
	return strings.Contains(s, "No space left on device") || strings.Contains(s, "Disk quota exceeded")
}

// InsufficientStorage is the 507 of a full disk; which names it ("the
// pod's workspace (SVC_WORKSPACE_DIR)", "the API server's data directory
// (SVC_DATA_DIR)").
func InsufficientStorage(which string, cause error) *Error {
	e := Coded(CodeInsufficientStorage, "No space left on "+which+". Free space on that disk and retry; nothing that was durable is lost.")
	e.Cause = cause
	return e
}
