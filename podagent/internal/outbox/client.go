package outbox

import (
	"net/http"

	"github.com/svc-dev/svc/shared/internalapi"
)

// permanent reports whether the API will never take this message: an
// invalid or oversized payload, or a channel that is not the project's.
// Everything else (network, 5xx, 429, 401/403 of a stale token, a 404 of an
// API without the route) may pass and is retried.
func permanent(e *internalapi.StatusError) bool {
	switch e.Status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return true
	case http.StatusNotFound:
		return e.Body.Error.Code == "channel_not_found"
	}
	return false
}
