package fs

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"path/filepath"
	"sort"
	"strings"

	"github.com/svc-dev/svc/shared/objstore"
)

// List implements objstore.Store. It walks only the directory named by the
// prefix up to its last "/", collects the matching keys, sorts them (a
// directory walk is not in lexical key order: "a.txt" sorts before "a/b")
// and reads each object's header.
func (s *Store) List(ctx context.Context, prefix string, fn func(objstore.ObjectInfo) error) error {
	start := s.objects
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		dir := prefix[:i]
		if objstore.ValidateKey(dir) != nil {
			return nil // no valid key has this prefix
		}
		start = filepath.Join(s.objects, filepath.FromSlash(dir))
	}
	var keys []string
	err := filepath.WalkDir(start, func(p string, d iofs.DirEntry, err error) error {
		if err != nil {
			if p == start && errors.Is(mapNotExist(err), objstore.ErrNotExist) {
				return filepath.SkipAll
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() || !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(s.objects, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if strings.HasPrefix(key, prefix) {
			keys = append(keys, key)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("objstore/fs: list %q: %w", prefix, err)
	}
	sort.Strings(keys)
	for _, key := range keys {
		info, err := s.Head(ctx, key)
		if errors.Is(err, objstore.ErrNotExist) {
			continue // deleted while we walked
		}
		if err != nil {
			return err
		}
		if err := fn(info); err != nil {
			return err
		}
	}
	return nil
}
