package hydrate_test

import (
	"context"
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/hydrate"
	"github.com/svc-dev/svc/apiserver/internal/hydrate/hydratetest"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/shared/syncmode"
	"github.com/svc-dev/svc/shared/testenv"
)

// Reconcile follows the project's mode (spec 3.1): a git_only or
// dual_shadow project gets rows from its durable .git (one per turn: the
// seed commit has none); an s3 project gets
// none, also when storage still holds the .git of an earlier mode (a
// project switched from git_only to s3 keeps its old repo.git.tar.gz).
func TestReconcileFollowsTheMode(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		mode syncmode.Mode
		rows int
	}{
		{"git_only", syncmode.GitOnly, 1},
		{"dual_shadow", syncmode.DualShadow, 1},
		{"switched to s3", syncmode.S3, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := storetest.Postgres(t)
			proj := storetest.Projects(t, db, "p")[0]
			st := hydratetest.MinIOStore(t)
			w := hydratetest.NewWork(t)
			w.Commit("seed", map[string]string{"a.txt": "1\n"})
			w.Commit("turn", map[string]string{"b.txt": "b\n"})
			w.Persist(st, proj.ID) // written while the project was git_only
			_, err := db.SetSyncMode(ctx, proj.ID, c.mode)
			testenv.Must(t, err)

			m, _ := newManager(t, st, func(o *hydrate.Options) { o.Checkpoints = db })
			r, err := m.Acquire(ctx, proj.ID)
			testenv.Must(t, err)
			r.Release()
			cps, err := db.ListCheckpoints(ctx, proj.ID, 10)
			testenv.Must(t, err)
			if len(cps) != c.rows || m.Stats().Reconciled != int64(c.rows) {
				t.Fatalf("%s: %d rows (%d reconciled), want %d", c.mode, len(cps), m.Stats().Reconciled, c.rows)
			}
		})
	}
}
