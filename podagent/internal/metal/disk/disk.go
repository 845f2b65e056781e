// Package disk makes and reads the ext4 workspace disk of a micro-VM guest
// (spec 10.5) with e2fsprogs, without mounting anything on the host: the
// host builds a disk from a staging directory (mkfs.ext4 -d), and when a
// VM is dead it reads the disk back read-only — e2fsck replays the journal
// on a copy, debugfs dumps the workspace from the copy — so no root mount
// is needed and the original disk is never written.
package disk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// Tools names the e2fsprogs binaries (defaults from PATH).
type Tools struct {
	Mkfs, Fsck, Debugfs string
}

func (t *Tools) defaults() error {
	var missing []string
	for _, x := range []struct {
		p    *string
		name string
	}{{&t.Mkfs, "mkfs.ext4"}, {&t.Fsck, "e2fsck"}, {&t.Debugfs, "debugfs"}} {
		if *x.p != "" {
			continue
		}
		p, err := exec.LookPath(x.name)
		if err != nil {
			for _, d := range []string{"/usr/sbin", "/sbin"} {
				if _, err := os.Stat(filepath.Join(d, x.name)); err == nil {
					p = filepath.Join(d, x.name)
				}
			}
		}
		if p == "" {
			missing = append(missing, x.name)
		}
		*x.p = p
	}
	if len(missing) > 0 {
		return fmt.Errorf("disk: %s not found (install the Debian package e2fsprogs)", strings.Join(missing, ", "))
	}
	return nil
}

// Check reports whether the tools are installed.
func (t *Tools) Check() error { return t.defaults() }

// Create writes a sparse ext4 image of sizeMB at path holding the tree of
// dir (owners and modes as on the host).
func (t *Tools) Create(ctx context.Context, path, dir string, sizeMB int) error {
	if err := t.defaults(); err != nil {
		return err
	}
	_ = os.Remove(path)
	return run(ctx, t.Mkfs, "-q", "-F", "-t", "ext4", "-L", "svc-workspace", "-E", "root_owner=0:0",
		"-d", dir, path, strconv.Itoa(sizeMB)+"M")
}

// SetOwner sets the owner of one path inside an image (tests and repairs).
func (t *Tools) SetOwner(ctx context.Context, image, path string, uid int) error {
	if err := t.defaults(); err != nil {
		return err
	}
	return run(ctx, t.Debugfs, "-w", "-R", fmt.Sprintf("set_inode_field %s uid %d", path, uid), image)
}

// Dump copies the directory src of image into dst (created) without
// writing image: it works on a copy whose journal e2fsck replays first.
// scratch holds the copy.
func (t *Tools) Dump(ctx context.Context, image, src, dst, scratch string) error {
	if err := t.defaults(); err != nil {
		return err
	}
	cp := filepath.Join(scratch, "rescue.img")
	if err := copySparse(image, cp); err != nil {
		return fmt.Errorf("disk: copying the image: %w", err)
	}
	defer os.Remove(cp)
	// 0: clean, 1: errors corrected, 2: corrected, reboot advised; more is
	// a file system e2fsck could not repair.
	if err := run(ctx, t.Fsck, "-f", "-y", cp); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() > 2 {
			return fmt.Errorf("disk: the file system is unreadable: %w", err)
		}
	}
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	// rdump writes <dst>/<basename of src>; debugfs reports errors on
	// stderr with exit status 0, so the result is checked.
	if err := run(ctx, t.Debugfs, "-R", fmt.Sprintf("rdump %s %s", src, dst), cp); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dst, filepath.Base(src))); err != nil {
		return fmt.Errorf("disk: %s not found in the image", src)
	}
	return nil
}

type runError struct {
	cmd    string
	err    error
	stderr string
}

func (e *runError) Error() string { return fmt.Sprintf("%s: %v: %s", e.cmd, e.err, e.stderr) }
func (e *runError) Unwrap() error { return e.err }

func run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Run(); err != nil {
		s := strings.TrimSpace(stderr.String())
		if len(s) > 2000 {
			s = s[len(s)-2000:]
		}
		return &runError{cmd: filepath.Base(name), err: err, stderr: s}
	}
	return nil
}

// copySparse copies a file, leaving zero blocks as holes.
func copySparse(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	zero := make([]byte, len(buf))
	var off int64
	for {
		n, err := in.Read(buf)
		if n > 0 {
			if !bytes.Equal(buf[:n], zero[:n]) {
				if _, werr := out.WriteAt(buf[:n], off); werr != nil {
					out.Close()
					return werr
				}
			}
			off += int64(n)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			out.Close()
			return err
		}
	}
	// off is the size read: a trailing hole still counts.
	if err := out.Truncate(off); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
