package hydrate_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/hydrate/hydratetest"
)

// A cache never turns into a permanent 500: a hydrated copy
// removed or damaged under a running replica (a second process clearing
// the data dir, an operator) is noticed at the next request and hydrated
// again; the request is answered from the fresh copy.
func TestVanishedOrDamagedCopyIsHydratedAgain(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		damage func(t *testing.T, hydratedDir, gitDir string)
	}{
		{"the whole hydrated dir cleared", func(t *testing.T, hydratedDir, _ string) {
			if err := os.RemoveAll(hydratedDir); err != nil {
				t.Fatal(err)
			}
		}},
		{"the copy's objects removed", func(t *testing.T, _, gitDir string) {
			if err := os.RemoveAll(filepath.Join(gitDir, "objects")); err != nil {
				t.Fatal(err)
			}
		}},
		{"HEAD's branch removed", func(t *testing.T, _, gitDir string) {
			for _, p := range []string{"refs/heads/main", "packed-refs"} {
				if err := os.RemoveAll(filepath.Join(gitDir, p)); err != nil {
					t.Fatal(err)
				}
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := hydratetest.MinIOStore(t)
			_, head := persistOne(t, st, "prj_heal")
			m, dir := newManager(t, st, nil)
			ctx := context.Background()
			r, err := m.Acquire(ctx, "prj_heal")
			if err != nil {
				t.Fatal(err)
			}
			gitDir := r.GitDir
			r.Release()
			tc.damage(t, dir, gitDir)

			r, err = m.Acquire(ctx, "prj_heal")
			if err != nil {
				t.Fatalf("the request after the damage: %v", err)
			}
			defer r.Release()
			if got := revParse(t, r, "HEAD"); got != head {
				t.Fatalf("HEAD = %s, want %s", got, head)
			}
			if s := m.Stats(); s.Downloads != 2 {
				t.Fatalf("%d downloads, want 2 (the damaged copy hydrated again)", s.Downloads)
			}
			// And it stays healthy: the next request uses the new copy.
			r2, err := m.Acquire(ctx, "prj_heal")
			if err != nil {
				t.Fatal(err)
			}
			r2.Release()
			if s := m.Stats(); s.Downloads != 2 {
				t.Fatalf("%d downloads after a healthy request, want 2", s.Downloads)
			}
		})
	}
}
