package datadir_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svc-dev/svc/shared/datadir"
)

// One directory has one owner: a second lock (another open file, as a
// second process has) is refused with an error naming the holder, and the
// directory is free again once the owner releases it.
func TestLockHasOneOwner(t *testing.T) {
	t.Parallel()
	host, _ := os.Hostname()
	cases := []struct {
		name string
		lock func(dir string) (*datadir.Lock, error)
		// want are substrings of the second owner's error.
		want []string
	}{
		{"data dir (lock file)", func(dir string) (*datadir.Lock, error) { return datadir.Acquire(dir, "SVC_DATA_DIR") },
			[]string{"SVC_DATA_DIR", fmt.Sprintf("process %d on host %s", os.Getpid(), host), "svc.lock"}},
		{"workspace (the directory itself)", func(dir string) (*datadir.Lock, error) { return datadir.AcquireDir(dir, "SVC_WORKSPACE_DIR") },
			[]string{"SVC_WORKSPACE_DIR", fmt.Sprintf("process %d", os.Getpid())}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "d")
			first, err := tc.lock(dir)
			if err != nil {
				t.Fatal(err)
			}
			second, err := tc.lock(dir)
			if !errors.Is(err, datadir.ErrLocked) {
				second.Release()
				t.Fatalf("second owner: %v, want ErrLocked", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			if err := first.Release(); err != nil {
				t.Fatal(err)
			}
			again, err := tc.lock(dir)
			if err != nil {
				t.Fatalf("after release: %v", err)
			}
			again.Release()
		})
	}
}
