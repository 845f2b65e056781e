package servertest

import (
	"context"
	"path/filepath"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/apiserver/internal/hydrate"
	"github.com/svc-dev/svc/apiserver/internal/hydrate/hydratetest"
	"github.com/svc-dev/svc/apiserver/internal/server"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/shared/runtimetoken"
)

// Hydrated is the whole API server in process (New, the real
// wiring) on a real Postgres and a real MinIO bucket, with one project whose
// workspace has a member key, a key of another workspace's user, and the
// project's runtime token.
type Hydrated struct {
	URL     string
	Store   *store.Store
	Objects *hydratetest.CountingStore
	Hydrate *hydrate.Manager
	Project store.Project
	// Key is a key of a member of the project's workspace.
	Key string
	// OtherKey is a valid key of a user of another workspace.
	OtherKey string
	// RuntimeToken is the project's runtime token (not accepted on reads).
	RuntimeToken string
}

// NewHydrated starts the server with checkpoint reads and smart-HTTP git
// (hydratetest builds the repositories it reads); mod may adjust hydrate
// options.
func NewHydrated(t testing.TB, mod func(*hydrate.Options)) *Hydrated {
	t.Helper()
	db := storetest.Postgres(t)
	objs := hydratetest.MinIOStore(t)
	log := zap.NewNop()
	if tt, ok := t.(*testing.T); ok {
		log = zaptest.NewLogger(tt)
	}
	hyd := hydratetest.NewManager(t, hydrate.Options{Store: objs, Dir: filepath.Join(t.TempDir(), "hydrated"), Checkpoints: db, Log: log}, mod)
	srv := New(t, server.Deps{Store: db, Log: log, RuntimeSecret: []byte(RuntimeSecret), Hydrate: hyd, Objects: objs})

	f := &Hydrated{URL: srv.URL, Store: db, Objects: objs, Hydrate: hyd}
	f.Project, f.Key = account(t, db, true)
	_, f.OtherKey = account(t, db, false)
	f.RuntimeToken = runtimetoken.Mint([]byte(RuntimeSecret), f.Project.ID)
	return f
}

// account creates a workspace with a member and a key, and a project when
// withProject.
func account(t testing.TB, db *store.Store, withProject bool) (store.Project, string) {
	t.Helper()
	acc := NewAccount(t, db)
	var p store.Project
	if withProject {
		var err error
		if p, err = db.CreateProject(context.Background(), acc.WorkspaceID, "proj"); err != nil {
			t.Fatal(err)
		}
	}
	return p, acc.Key
}
