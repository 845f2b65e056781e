// Package checkpointreads serves the checkpoint reads of spec 4.3 from the
// hydrated copy of a project's durable .git (internal/hydrate), one file
// each, and the rollback that a restore asks of the pod:
//
//	GET  /api/projects/:id/checkpoints/graph          graph.go: commits newest first, tags, Published badge, cursor pagination
//	GET  /api/projects/:id/checkpoints/commits/:sha   commit.go: one commit with its changed files
//	GET  /api/projects/:id/checkpoints/diff?from=&to= diff.go: unified diff, capped
//	GET  /api/projects/:id/checkpoints/status         status.go: HEAD, sync mode, last row, durable object, publish
//	GET  /api/projects/:id/checkpoints/files          files.go: current files from the mode's read source
//	POST /api/projects/:id/checkpoints/:sha/restore   restore.go: rollback in the pod
//
// handlers.go is the HTTP side; the console calls the Read functions.
// Every git read first refreshes the copy (one ETag probe; a download only when
// the object changed). A sha or ref from the caller is validated before it
// reaches git, and reaches it only through gitrun's dynamic arguments.
// Authentication (API key of a member of the project's workspace) is the
// routes' middleware.
package checkpointreads

import (
	"context"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/hydrate"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/settings"
)

// Defaults.
const (
	DefaultLimit        = 50
	MaxLimit            = 500
	DefaultMaxDiffBytes = 1 << 20
	MaxFiles            = 5000
)

// API holds the handlers' dependencies. Build it with New: the value is
// complete from then on and never written again, so the route table and the
// console share one (reads run concurrently on it).
type API struct {
	Hydrate *hydrate.Manager
	Store   *store.Store
	// Objects serves the S3 read source (docs/sync-modes.md §5).
	Objects objstore.Store
	// Runtime reaches the pod for a rollback; nil leaves Restore unmounted.
	Runtime Runtime
	Log     *zap.Logger
	// MaxDiffBytes caps a diff body (default DefaultMaxDiffBytes).
	MaxDiffBytes int
	Now          func() time.Time
}

// New returns the reads over a with its zero options filled in. The server
// builds one in server.New; its route table mounts Graph, Commit, Diff,
// Status, Files and Restore behind APIKey and ProjectMember on the "id"
// parameter, and the console calls the Read functions of the same value.
func New(a API) *API {
	if a.Log == nil {
		a.Log = zap.NewNop()
	}
	if a.Now == nil {
		a.Now = time.Now
	}
	a.MaxDiffBytes = settings.PositiveOr(a.MaxDiffBytes, DefaultMaxDiffBytes)
	return &a
}

// acquire refreshes and opens the project's copy, setting the hydrate
// headers on h (nil: none).
func (a *API) acquire(ctx context.Context, projectID string, h http.Header) (*hydrate.Repo, error) {
	r, err := a.Hydrate.Acquire(ctx, projectID)
	if err != nil {
		return nil, hydrate.APIError(err)
	}
	if h != nil {
		hydrate.SetHeaders(h, r)
	}
	return r, nil
}

// acquireAt is acquire and resolveNamed(rev, notFound) in the acquired
// repository; the caller releases the repository when err is nil.
func (a *API) acquireAt(ctx context.Context, projectID string, h http.Header, rev, notFound string) (*hydrate.Repo, string, error) {
	r, err := a.acquire(ctx, projectID, h)
	if err != nil {
		return nil, "", err
	}
	sha, err := resolveNamed(ctx, r, rev, notFound)
	if err != nil {
		r.Release()
		return nil, "", err
	}
	return r, sha, nil
}
