// Package gateway serves the public chat-completions API of spec part A
// (sections 2.1-2.3, 4.1, 7.1): GET /models and POST /chat/completions in the
// OpenAI wire format, mounted under /api/v1 and, identically, /v1. The same
// completion handler serves pods on /internal/projects/{id}/chat/completions.
package gateway

import (
	"net/http"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/apierr"
	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/metering"
	"github.com/svc-dev/svc/apiserver/internal/tracing"
	"github.com/svc-dev/svc/apiserver/internal/upstream"
)

// OwnedBy names the service as owner of every model (spec 2.1).
const OwnedBy = "svc"

// DefaultMaxBody is the request body limit when none is configured.
const DefaultMaxBody = 4 << 20

// API holds the handlers' dependencies.
type API struct {
	Catalog *catalog.Catalog
	Meter   *metering.Meter
	// Router sends completions to a model's deployments (fallbacks,
	// retries, key pools, circuit breakers).
	Router  *upstream.Router
	Log     *zap.Logger
	MaxBody int64
	Metrics *Metrics
	// Tracer records spans (auth, admit, upstream, stream, meter); nil: off.
	Tracer *tracing.Tracer
	// Streams tracks streams relayed on connections taken over from
	// net/http (HTTP/1.1 clients); nil: every stream is relayed through
	// the handler.
	Streams *Streams
}

type modelJSON struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	DisplayName string `json:"display_name"`
}

// ListModels answers GET /models with the models the key's plan includes.
func (a *API) ListModels(c echo.Context) error {
	p := principal(c)
	plan, _ := a.Catalog.Plan(p.Plan)
	data := make([]modelJSON, 0, len(a.Catalog.Models))
	for _, m := range a.Catalog.Models {
		if !plan.AllowsTier(m.Tier) {
			continue
		}
		data = append(data, modelOf(m))
	}
	return c.JSON(http.StatusOK, map[string]any{"object": "list", "data": data})
}

// RetrieveModel answers GET /models/{id} (the SDKs' models.retrieve): the
// model by id or alias, 404 model_not_found when it is unknown or the key's
// plan does not include it.
func (a *API) RetrieveModel(c echo.Context) error {
	p := principal(c)
	plan, _ := a.Catalog.Plan(p.Plan)
	id := c.Param("id")
	m, ok := a.Catalog.Resolve(id)
	if !ok || !plan.AllowsTier(m.Tier) {
		return apierr.ModelNotFound(id)
	}
	return c.JSON(http.StatusOK, modelOf(m))
}

func modelOf(m catalog.Model) modelJSON {
	return modelJSON{ID: m.ID, Object: "model", Created: int64(m.Created), OwnedBy: OwnedBy, DisplayName: m.DisplayName}
}
