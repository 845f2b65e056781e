// Package publicapi serves the public chat-completions API of spec part A
// (sections 2.1-2.3, 4.1, 7.1): GET /models and POST /chat/completions in the
// OpenAI wire format, mounted under /api/v1 and, identically, /v1. The same
// completion handler serves pods on /internal/projects/{id}/chat/completions.
package publicapi

import (
	"net/http"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/metering"
	"github.com/svc-dev/svc/apiserver/internal/upstream"
)

// OwnedBy names the service as owner of every model (spec 2.1).
const OwnedBy = "svc"

// DefaultMaxBody is the request body limit when none is configured.
const DefaultMaxBody = 4 << 20

// API holds the handlers' dependencies.
type API struct {
	Catalog  *catalog.Catalog
	Meter    *metering.Meter
	Upstream *upstream.Client
	Log      *zap.Logger
	MaxBody  int64
	Metrics  *Metrics
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
		data = append(data, modelJSON{ID: m.ID, Object: "model", Created: 0, OwnedBy: OwnedBy, DisplayName: m.DisplayName})
	}
	return c.JSON(http.StatusOK, map[string]any{"object": "list", "data": data})
}
