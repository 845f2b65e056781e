package upstream

import (
	"errors"
	"net"
	"syscall"
)

// alive reports whether an idle connection is still open and quiet: one
// non-blocking read finds neither the upstream's close nor unasked-for
// bytes. (A read deadline in the past would not do: Go fails such a read
// before asking the kernel.)
func alive(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	quiet := false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, rerr := syscall.Read(int(fd), b[:])
		quiet = errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK)
		return true // never wait for readiness
	})
	return err == nil && quiet
}
