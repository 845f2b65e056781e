// Package atomicfile replaces files so that a reader, or a crash, sees
// either the old content or the new, never a part: a temp file in the same
// directory, then a rename. Write is for small state files and makes the
// change durable (fsync of the file and of the directory): the pod's small
// state files (ETags, durable state) use it. WriteIn
// streams content that can be fetched again (restored assets) inside an
// os.Root, without fsync.
package atomicfile

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// Write replaces name with data, durably; missing parents are created.
func Write(name string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := replace(root, filepath.Base(name), bytes.NewReader(data), perm, true); err != nil {
		return err
	}
	_ = SyncDir(dir)
	return nil
}

// WriteIn replaces name, a path inside root, with what r yields; missing
// parents are created inside root. Nothing is fsynced.
func WriteIn(root *os.Root, name string, r io.Reader, perm os.FileMode) error {
	if dir := filepath.Dir(name); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	return replace(root, name, r, perm, false)
}

// replace writes r to a fresh temp file beside name in root (fsynced when
// sync is set), then renames it over name; on any error the temp file is
// removed and name is untouched.
func replace(root *os.Root, name string, r io.Reader, perm os.FileMode, sync bool) error {
	tmp := fmt.Sprintf("%s.%016x.tmp", name, rand.Uint64())
	f, err := root.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if err == nil {
		err = f.Chmod(perm) // exactly perm, whatever the umask
	}
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		_ = root.Remove(tmp)
	}
	return err
}
