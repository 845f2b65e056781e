package outbox

import (
	"context"
	"net/http"
	"time"

	"github.com/svc-dev/svc/podagent/internal/apiclient"
	"github.com/svc-dev/svc/shared/wire"
)

// Client posts outbox messages to the API:
// POST {SVC_API_URL}/internal/projects/{id}/outbox with the runtime token.
type Client struct {
	APIURL    string
	ProjectID string
	Token     string
	HTTP      *http.Client
	// Timeout of one POST (default 15 s).
	Timeout time.Duration
}

// StatusError is a non-2xx answer of the API.
type StatusError = apiclient.StatusError

// permanent reports whether the API will never take this message: an
// invalid or oversized payload, or a channel that is not the project's.
// Everything else (network, 5xx, 429, 401/403 of a stale token, a 404 of an
// API without the route) may pass and is retried.
func permanent(e *StatusError) bool {
	switch e.Status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return true
	case http.StatusNotFound:
		return e.Body.Error.Code == "channel_not_found"
	}
	return false
}

// Put posts one message.
func (c *Client) Put(ctx context.Context, m wire.OutboxPut) (wire.OutboxPutResponse, error) {
	var out wire.OutboxPutResponse
	api := apiclient.Client{BaseURL: c.APIURL, ProjectID: c.ProjectID, Token: c.Token, HTTP: c.HTTP, Timeout: c.Timeout}
	err := api.Do(ctx, "outbox put", http.MethodPost, "outbox", m, &out)
	return out, err
}
