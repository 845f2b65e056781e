package atomicfile

import (
	"io/fs"
	"os"
	"path/filepath"
)

// SyncTree fsyncs every regular file and directory below root (root
// included), so a tree that was written without fsync — an extracted
// archive — is on disk before a state file that vouches for it is written.
// Links are not followed.
func SyncTree(root string) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil
		}
		return syncPath(path)
	})
}

// SyncDir fsyncs a directory, making a rename into it durable.
func SyncDir(dir string) error { return syncPath(dir) }

func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
