package publish

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

// API is the HTTP form of publish (spec 10.4): POST
// /api/projects/{id}/publish {"subdomain": "…"} → {sha, tag}, behind API-key
// auth and project membership.
type API struct {
	Runtime Runtime
	Store   *store.Store
	Now     func() time.Time
}

type request struct {
	Subdomain string `json:"subdomain"`
}

// Handle publishes the project's current head.
func (a *API) Handle(c echo.Context) error {
	var req request
	if err := (&echo.DefaultBinder{}).BindBody(c, &req); err != nil {
		return wire.Coded("invalid_json", "Body must be a JSON object with a string 'subdomain'.")
	}
	if err := wire.ValidateSubdomain(req.Subdomain); err != nil {
		return wire.Coded("invalid_subdomain", err.Error())
	}
	p := httpmw.ProjectFrom(c)
	ep, err := a.Runtime.Ensure(c.Request().Context(), p)
	if err != nil {
		return runtimes.Unavailable(err)
	}
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	hc := &http.Client{Timeout: DefaultTimeout, Transport: ep.Transport}
	res, err := PublishWith(c.Request().Context(), hc, ep.URL.String(), ep.Token, req.Subdomain, now())
	if err != nil {
		var pe *internalapi.StatusError
		if errors.As(err, &pe) && pe.Status == http.StatusConflict {
			e := wire.Relayed(pe.Status, wire.ErrorDetail{Type: wire.TypeInvalidRequest, Code: pe.Body.Error.Code,
				Message: pe.Body.Error.Message})
			e.Cause = err
			return e
		}
		return &wire.Error{Code: "publish_failed",
			Message: "The agent could not flush and tag the workspace.", Cause: err}
	}
	if _, err := a.Store.SetPublished(c.Request().Context(), p.ID, res.SHA, res.Tag); err != nil {
		return wire.Internal(err)
	}
	return c.JSON(http.StatusOK, res)
}
