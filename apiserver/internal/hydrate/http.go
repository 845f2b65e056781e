package hydrate

import (
	"context"
	"errors"
	"net/http"

	"github.com/svc-dev/svc/shared/wire"
)

// Response headers of every read served from a copy.
const (
	// HeaderStale is "true" when the copy is the last good one because the
	// refresh failed; HeaderError then carries the failure's code.
	HeaderStale = "X-Svc-Hydrate-Stale"
	HeaderError = "X-Svc-Hydrate-Error"
	// HeaderETag is the ETag of the durable object the copy came from.
	HeaderETag = "X-Svc-Durable-ETag"
)

// Error codes of hydrate failures.
const (
	CodeNotFound    = "repository_not_found"
	CodeCorrupt     = "repository_corrupt"
	CodeUnavailable = "object_storage_unavailable"
)

// APIError maps an Acquire error to the API's error type.
func APIError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNotFound):
		return wire.Coded(CodeNotFound,
			"The project has no durable repository yet (object <projectId>/repo.git.tar.gz does not exist).")
	case errors.Is(err, ErrCorrupt):
		e := wire.Coded(CodeCorrupt,
			"The project's durable repository object is corrupt or unreadable, and this replica has no earlier copy to serve.")
		e.Cause = err
		return e
	case errors.Is(err, ErrUnavailable):
		e := wire.Coded(CodeUnavailable,
			"Object storage is unavailable and this replica has no copy of the repository to serve.")
		e.Cause = err
		e.Headers = map[string]string{"Retry-After": "5"}
		return e
	case errors.Is(err, ErrDiskFull):
		e := wire.Coded("insufficient_storage",
			"No space left on the API server's data directory (SVC_DATA_DIR) for the project's hydrated repository. Free space on that disk and retry; nothing durable is lost.")
		e.Cause = err
		return e
	case errors.Is(err, ErrInvalidProject):
		return wire.Coded("invalid_project", "Invalid project id.")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		e := wire.Coded(CodeUnavailable, "Hydrating the repository timed out.")
		e.Cause = err
		return e
	}
	return wire.Internal(err)
}

// ErrorCode is the code APIError gives err ("" for nil).
func ErrorCode(err error) string {
	if err == nil {
		return ""
	}
	var e *wire.Error
	if errors.As(APIError(err), &e) {
		return e.Code
	}
	return "internal_error"
}

// SetHeaders marks a response served from r.
func SetHeaders(h http.Header, r *Repo) {
	h.Set(HeaderETag, r.Object.ETag)
	if r.Stale {
		h.Set(HeaderStale, "true")
		h.Set(HeaderError, ErrorCode(r.StaleErr))
	}
}
