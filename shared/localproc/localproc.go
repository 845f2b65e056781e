// Package localproc holds what the binaries that start processes on their
// own machine share (spec 10.1, 10.5: the local runtime driver's podagents,
// the metal host's QEMU guests): a free port to hand the child, and the
// tail of its log for the error that says why it did not come up.
package localproc

import (
	"io"
	"net"
	"os"
	"strings"
)

// FreePort returns a TCP port free on host at the time of the call.
func FreePort(host string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Tail returns the last n bytes of the file at path, trimmed ("" when it
// cannot be read), for error messages.
func Tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
	}
	b, _ := io.ReadAll(io.LimitReader(f, n))
	return strings.TrimSpace(string(b))
}
