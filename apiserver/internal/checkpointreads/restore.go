package checkpointreads

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/apiserver/internal/httpmw"
	"github.com/svc-dev/svc/apiserver/internal/runtimes"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/wire"
)

// Runtime finds (or starts) the agent of a project.
type Runtime interface {
	Ensure(ctx context.Context, p store.Project) (runtimes.Endpoint, error)
}

// RestoreTimeout bounds the pod's rollback (commit, persist, record).
const RestoreTimeout = 2 * time.Minute

// Restore is POST /api/projects/:id/checkpoints/:sha/restore, the rollback
// of spec 10.6.3 (docs/sync-modes.md §6): the pod commits a new turn whose
// tree is that checkpoint's, persisted and recorded like any turn. The sha
// must be in the project's durable history (git_only and dual_shadow); in
// s3 the pod alone knows its local history and answers 404 itself.
func (a *API) Restore(c echo.Context) error {
	sha := c.Param("sha")
	if !validSHA(sha) {
		return invalidSHA("sha", sha)
	}
	proj := httpmw.ProjectFrom(c)
	ctx := c.Request().Context()
	if a.Runtime == nil {
		return wire.Internal(errors.New("checkpointreads: no runtime"))
	}
	if proj.CloudSyncMode.GitCheckpoints() {
		r, err := a.acquire(c.Request().Context(), httpmw.ProjectFrom(c).ID, c.Response().Header())
		if err != nil {
			return err
		}
		known := r.Git("cat-file", "-e").AddDynamic(sha+"^{commit}").Run(ctx) == nil
		r.Release()
		if !known {
			return wire.Coded("commit_not_found", "The project's history has no commit "+sha+".")
		}
	}
	ep, err := a.Runtime.Ensure(ctx, proj)
	if err != nil {
		return runtimes.Unavailable(err)
	}
	pc := &internalapi.PodClient{BaseURL: ep.URL.String(), Token: ep.Token,
		HTTP: &http.Client{Transport: ep.Transport}, Timeout: RestoreTimeout}
	out, err := pc.Restore(ctx, wire.RestoreRequest{SHA: sha})
	if se, ok := internalapi.AsStatus(err); ok && (se.Status == http.StatusNotFound || se.Status == http.StatusConflict) {
		e := wire.Relayed(se.Status, wire.ErrorDetail{Type: wire.TypeInvalidRequest, Code: se.Body.Error.Code, Message: se.Body.Error.Message})
		if se.Body.Error.Code == "turn_in_progress" {
			// The pod waited for the running turn as long as the deadline
			// allowed (docs/sync-modes.md §6).
			e.Headers = map[string]string{"Retry-After": "5"}
		}
		return e
	}
	if err != nil {
		e := wire.Coded("restore_failed", "The agent could not commit the rollback.")
		e.Cause = err
		return e
	}
	return c.JSON(http.StatusOK, out)
}
