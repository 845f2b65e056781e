package datadir

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// LockFile is the owner's lock of a data directory (like PostgreSQL's
// postmaster.pid): the API server holds an exclusive flock on it while it
// runs, and the file says who holds it.
func LockFile(dir string) string { return filepath.Join(dir, "svc.lock") }

// ErrLocked is wrapped by the error of Acquire and AcquireDir when another
// process holds the directory.
var ErrLocked = errors.New("datadir: the directory has another owner")

// Lock is an exclusive advisory lock (flock) held by this process; the
// kernel releases it when the process exits, however it exits, so a crash
// never leaves a directory locked.
type Lock struct {
	f *os.File
}

// Release drops the lock (the file stays: its content is only read while
// another process holds it).
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// Acquire takes the owner's lock of dir (what names the directory in the
// error, e.g. "SVC_DATA_DIR"): an exclusive flock on LockFile(dir), which
// then holds this process's pid, host and start time. Call it before
// anything in dir is cleared or rewritten. When another process holds it,
// the error (wrapping ErrLocked) names that process from the file.
func Acquire(dir, what string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("datadir: %s %s: %w", what, dir, err)
	}
	path := LockFile(dir)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("datadir: %s %s: %w", what, dir, err)
	}
	if err := flock(f); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, ErrLocked) {
			return nil, fmt.Errorf("%w: %s %s is in use by %s (lock file %s); one data directory has one owner: stop that process or give this one another directory",
				ErrLocked, what, dir, describe(string(holder)), path)
		}
		return nil, fmt.Errorf("datadir: locking %s: %w", path, err)
	}
	host, _ := os.Hostname()
	// The program's name only: flags may carry secrets.
	info := fmt.Sprintf("pid=%d\nhost=%s\nsince=%s\nprogram=%s\n", os.Getpid(), host,
		time.Now().UTC().Format(time.RFC3339), filepath.Base(os.Args[0]))
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(info), 0)
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("datadir: writing %s: %w", path, err)
	}
	return &Lock{f: f}, nil
}

// AcquireDir takes an exclusive flock on the directory dir itself, writing
// nothing into it: the pod's workspace is a git work tree that the agent,
// git and the S3 layers all see, and its .git is replaced by a restore, so
// no lock file can live there. The holder is named from /proc/locks (its
// pid as this process sees it).
func AcquireDir(dir, what string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("datadir: %s %s: %w", what, dir, err)
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("datadir: %s %s: %w", what, dir, err)
	}
	if err := flock(f); err != nil {
		holder := holderOf(f)
		f.Close()
		if errors.Is(err, ErrLocked) {
			return nil, fmt.Errorf("%w: %s %s is in use by %s; one directory has one owner: stop that process or give this one another directory",
				ErrLocked, what, dir, holder)
		}
		return nil, fmt.Errorf("datadir: locking %s: %w", dir, err)
	}
	return &Lock{f: f}, nil
}

func flock(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EWOULDBLOCK):
			return ErrLocked
		}
		return err
	}
}

// describe turns the lock file's key=value lines into "process 123 on
// host h (since …)".
func describe(content string) string {
	kv := map[string]string{}
	for _, line := range strings.Split(content, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			kv[k] = v
		}
	}
	if kv["pid"] == "" {
		return "another process (its lock file names none yet)"
	}
	s := "process " + kv["pid"]
	if kv["host"] != "" {
		s += " on host " + kv["host"]
	}
	if kv["since"] != "" {
		s += " since " + kv["since"]
	}
	if kv["program"] != "" {
		s += " (" + kv["program"] + ")"
	}
	return s
}

// holderOf finds the process holding a flock on f's inode in /proc/locks.
func holderOf(f *os.File) string {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "another process"
	}
	dev := fmt.Sprintf("%02x:%02x:%d", unix.Major(uint64(st.Dev)), unix.Minor(uint64(st.Dev)), st.Ino)
	pl, err := os.Open("/proc/locks")
	if err != nil {
		return "another process"
	}
	defer pl.Close()
	sc := bufio.NewScanner(pl)
	for sc.Scan() {
		// "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 || fs[1] != "FLOCK" || fs[5] != dev {
			continue
		}
		if pid, err := strconv.Atoi(fs[4]); err == nil && pid > 0 {
			return "process " + fs[4] + program(pid)
		}
	}
	return "another process"
}

// program is " (name)" of pid (its comm, never its arguments: they may
// carry secrets), or "".
func program(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return ""
	}
	return " (" + string(bytes.TrimSpace(b)) + ")"
}
