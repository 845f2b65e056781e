package agentapi

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/apiserver/internal/outbox"
	"github.com/svc-dev/svc/shared/wire"
)

// OutboxPut is POST /internal/projects/{id}/outbox: the pod hands over one
// late reply (a sync request that timed out, an async reply whose callback
// gave up). Idempotent on (project, correlationId): 201 created, 200 when it
// was already kept.
func (a *API) OutboxPut(c echo.Context) error {
	projectID, err := ownProject(c, "put messages in its outbox")
	if err != nil {
		return err
	}
	var in wire.OutboxPut
	if err := readJSON(c, outbox.MaxBodyBytes, &in, "a JSON outbox message"); err != nil {
		return err
	}
	ctx, cancel := writeContext(c)
	defer cancel()
	id, created, err := a.Outbox.Put(ctx, projectID, in)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return c.JSON(status, wire.OutboxPutResponse{ID: id, Created: created})
}

// OutboxPending is GET /internal/projects/{id}/outbox/pending: how many of
// the channel's messages a poll would return now, for the pod's health.
func (a *API) OutboxPending(c echo.Context) error {
	projectID, err := ownProject(c, "count its outbox")
	if err != nil {
		return err
	}
	p, err := a.Outbox.Pending(c.Request().Context(), projectID)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, p)
}
