package archive

import (
	"os"

	"golang.org/x/sys/unix"
)

// growPipe raises a pipe's buffer to 1 MiB (Linux's default is 64 KiB), so
// the decompressor writes, and the extractor reads, in larger steps with
// fewer wake-ups. Best effort: the system's pipe-max-size may refuse it.
func growPipe(f *os.File) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, 1<<20) })
}
