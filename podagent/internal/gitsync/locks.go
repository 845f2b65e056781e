package gitsync

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// lockDirs are where git leaves <name>.lock files: .git itself (index,
// HEAD, config, packed-refs, shallow, ORIG_HEAD...), refs and reflogs.
// objects/ is not walked: git writes objects through tmp files, never locks.
var lockDirs = []string{"", "refs", "logs"}

// RemoveStaleLocks deletes the lock files git left in .git (a git process
// killed mid-write leaves index.lock, HEAD.lock, refs/heads/main.lock... and
// every later git write fails with "File exists" forever).
// The pod is the repository's sole writer (spec 10.1.1, fenced), so it calls
// this at start, before anything runs git, and before each turn's stage and
// commit under the repository lock, when none of its own git writers runs:
// every lock found then is stale. It returns the paths removed, relative to
// .git.
func (r *Repo) RemoveStaleLocks() ([]string, error) {
	gitDir := r.GitDir()
	var removed []string
	var errs []error
	for _, sub := range lockDirs {
		root := filepath.Join(gitDir, sub)
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				errs = append(errs, err)
				return nil
			}
			if d.IsDir() {
				if path != root && sub == "" {
					return filepath.SkipDir // only the top level of .git itself
				}
				return nil
			}
			if !strings.HasSuffix(d.Name(), ".lock") || !d.Type().IsRegular() {
				return nil
			}
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
				return nil
			}
			rel, _ := filepath.Rel(gitDir, path)
			removed = append(removed, rel)
			return nil
		})
		if err != nil {
			errs = append(errs, err)
		}
	}
	return removed, errors.Join(errs...)
}
