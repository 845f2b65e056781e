package fs

import (
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"syscall"
)

// lockStripes is the number of lock files. Keys hash onto them; two keys on
// one stripe only serialise their (short) check-and-rename sections.
const lockStripes = 256

// lock takes the exclusive flock of key's stripe. flock locks belong to the
// open file description, so the lock excludes other goroutines of this
// process (each opens its own descriptor) as well as other processes.
func (s *Store) lock(key string) (unlock func(), err error) {
	h := fnv.New32a()
	h.Write([]byte(key))
	name := filepath.Join(s.locks, fmt.Sprintf("%02x", h.Sum32()%lockStripes))
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("objstore/fs: lock %q: %w", key, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("objstore/fs: flock %q: %w", key, err)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
