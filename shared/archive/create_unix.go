//go:build unix

package archive

import (
	"io"
	"io/fs"
	"path"

	"golang.org/x/sys/unix"
)

// createNew creates name, which must not exist, with one openat relative
// to its held-open directory: the last component is a single name and
// O_EXCL|O_NOFOLLOW never follow a symlink there, so the file is inside
// the target whenever its directory is. The descriptor is written directly:
// a regular file needs none of the poller set-up os.File does on open
// (four fcntl and a failing epoll_ctl per file).
func (x *extractor) createNew(name string, mode fs.FileMode) (io.WriteCloser, error) {
	d, err := x.dir(path.Dir(name))
	if err != nil {
		return nil, err
	}
	base := path.Base(name)
	for {
		fd, err := unix.Openat(int(d.Fd()), base, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(mode.Perm()))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "openat", Path: name, Err: err}
		}
		return fdFile(fd), nil
	}
}

// fdFile is a file descriptor open for writing.
type fdFile int

func (f fdFile) Write(p []byte) (int, error) {
	written := 0
	for written < len(p) {
		n, err := unix.Write(int(f), p[written:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return written, &fs.PathError{Op: "write", Path: "", Err: err}
		}
		if n == 0 {
			return written, io.ErrShortWrite
		}
		written += n
	}
	return written, nil
}

func (f fdFile) Close() error {
	if err := unix.Close(int(f)); err != nil {
		return &fs.PathError{Op: "close", Path: "", Err: err}
	}
	return nil
}
