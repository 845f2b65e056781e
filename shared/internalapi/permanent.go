package internalapi

import (
	"net/http"

	"github.com/svc-dev/svc/shared/wire"
)

// Permanent reports whether err is an answer of the API that the same
// request will always get, so a pod→API client drops or sets aside what it
// sent instead of retrying: 400, 413 or 422 (the payload is refused), or a
// 404 naming what does not exist (channel_not_found, project_not_found, …).
// Everything else may pass later and is retried: no answer (network), 5xx,
// 429, 401/403 (a token being rotated), 409, and a 404 of a route the API
// does not serve yet (not_found: an older API during a rollout). Every
// pod→API client decides with it.
func Permanent(err error) bool {
	se, ok := AsStatus(err)
	if !ok {
		return false
	}
	switch se.Status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return true
	case http.StatusNotFound:
		code := se.Body.Error.Code
		return code != "" && code != wire.CodeNotFound
	}
	return false
}
