package internalapi

import "net/http"

// Permanent reports whether the API will never take what was handed over,
// so a hand-over queue (the outbox relay, the attempt log, the checkpoint
// records) sets the item aside instead of retrying it: an invalid (400),
// oversized (413) or unprocessable (422) payload, or a 404 that names what
// is missing with an error code (a channel or project the API does not
// have). Everything else may pass and is retried: the network, 5xx, 429,
// 401/403 of a stale token, and a 404 without a code (an API without the
// route yet, a proxy in between).
func Permanent(err error) bool {
	se, ok := AsStatus(err)
	if !ok {
		return false
	}
	switch se.Status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return true
	case http.StatusNotFound:
		return se.Body.Error.Code != ""
	}
	return false
}
