package agentapi

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/apiserver/internal/webhooklog"
	"github.com/svc-dev/svc/shared/wire"
)

// WebhookAttempts is POST /internal/projects/{id}/webhook/attempts: the pod's
// batch of callback attempt records for the attempt log
// (docs/webhook-delivery.md), stored idempotently by record id.
func (a *API) WebhookAttempts(c echo.Context) error {
	projectID, err := ownProject(c, "record its callback attempts")
	if err != nil {
		return err
	}
	var in wire.WebhookAttemptsPut
	if err := readJSON(c, webhooklog.MaxBodyBytes, &in, "JSON attempt records"); err != nil {
		return err
	}
	ctx, cancel := writeContext(c)
	defer cancel()
	n, err := a.Attempts.Put(ctx, projectID, in.Attempts)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, wire.WebhookAttemptsPutResponse{Stored: n})
}
