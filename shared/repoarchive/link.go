package repoarchive

import (
	"errors"
	"os"
	"path/filepath"
)

// LinkTree hard-links the regular files under from into the same paths
// under to, creating the directories; other files (symlinks, sockets) are
// skipped. It serves copies of content-addressed files, which are never
// rewritten in place: a git object or pack (a commit-graph is replaced by
// rename), a large-file object. With skipMissing a path that is gone
// (from itself, or a file removed during the walk) is passed over instead
// of failing the link.
func LinkTree(from, to string, skipMissing bool) error {
	return filepath.Walk(from, func(path string, fi os.FileInfo, err error) error {
		if skipMissing && errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		dst := filepath.Join(to, rel)
		if fi.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		return os.Link(path, dst)
	})
}
