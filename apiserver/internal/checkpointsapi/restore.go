package checkpointsapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/apiserver/internal/apierr"
	"github.com/svc-dev/svc/apiserver/internal/httpmw"
	"github.com/svc-dev/svc/apiserver/internal/runtime"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/wire"
)

// Runtime finds (or starts) the agent of a project.
type Runtime interface {
	Ensure(ctx context.Context, p store.Project) (runtime.Endpoint, error)
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
		return apierr.Internal(errors.New("checkpointsapi: no runtime"))
	}
	if ReadSource(proj) == ReadSourceGit || proj.CloudSyncMode == "dual_shadow" {
		r, err := a.acquire(c)
		if err != nil {
			return err
		}
		known := r.Git("cat-file", "-e").AddDynamic(sha+"^{commit}").Run(ctx) == nil
		r.Release()
		if !known {
			return apierr.NotFound("commit_not_found", "The project's history has no commit "+sha+".")
		}
	}
	ep, err := a.Runtime.Ensure(ctx, proj)
	if err != nil {
		var se *runtime.StartError
		if errors.As(err, &se) || errors.Is(err, runtime.ErrOffline) {
			e := apierr.New(http.StatusServiceUnavailable, apierr.TypeServer, "agent_unavailable",
				"The project's agent is not available; retry shortly.")
			e.Headers, e.Cause = map[string]string{"Retry-After": "5"}, err
			return e
		}
		return apierr.Internal(err)
	}
	body, _ := json.Marshal(wire.RestoreRequest{SHA: sha})
	rctx, cancel := context.WithTimeout(ctx, RestoreTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, strings.TrimSuffix(ep.URL.String(), "/")+"/agent/restore", bytes.NewReader(body))
	if err != nil {
		return apierr.Internal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+ep.Token)
	resp, err := (&http.Client{Transport: ep.Transport}).Do(req)
	if err != nil {
		return &apierr.Error{Status: http.StatusBadGateway, Type: apierr.TypeServer, Code: "restore_failed",
			Message: "The agent could not be reached for the rollback.", Cause: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		var eb wire.ErrorBody
		_ = json.Unmarshal(b, &eb)
		if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusConflict {
			return &apierr.Error{Status: resp.StatusCode, Type: apierr.TypeInvalidRequest, Code: eb.Error.Code, Message: eb.Error.Message}
		}
		return &apierr.Error{Status: http.StatusBadGateway, Type: apierr.TypeServer, Code: "restore_failed",
			Message: "The agent could not commit the rollback.", Cause: fmt.Errorf("pod answered %d: %s", resp.StatusCode, b)}
	}
	var out wire.RestoreResponse
	if err := json.Unmarshal(b, &out); err != nil {
		return apierr.Internal(err)
	}
	return c.JSON(http.StatusOK, out)
}
