package wire

import "net/http"

// Statuses is the one table from error codes to HTTP statuses: the codes of
// spec 7.1, the API server's and the pod's own fixed codes. A code means the
// same status whichever binary answers it (a webhook caller sees the pod's
// codes through the API's agent-proxy). Business code returns
// &Error{Code, Message}; Resolve(Statuses) fills the status from here.
var Statuses = map[string]int{
	// The public API, the internal routes and the agent-proxy.
	"invalid_api_key":       http.StatusUnauthorized,
	"invalid_runtime_token": http.StatusUnauthorized,
	"model_not_found":       http.StatusNotFound,
	"model_tier_restricted": http.StatusForbidden,
	"plan_not_found":        http.StatusForbidden,
	"usage_limit_reached":   http.StatusPaymentRequired,
	"rate_limited":          http.StatusTooManyRequests,
	"request_too_large":     http.StatusRequestEntityTooLarge,
	"not_found":             http.StatusNotFound,
	"method_not_allowed":    http.StatusMethodNotAllowed,
	"upstream_error":        http.StatusBadGateway,
	"upstream_unavailable":  http.StatusBadGateway,
	"upstream_timeout":      http.StatusGatewayTimeout,
	"upstream_cooling_down": http.StatusServiceUnavailable, // every deployment's breaker open
	"publish_failed":        http.StatusBadGateway,
	"agent_unavailable":     http.StatusServiceUnavailable,
	"service_unavailable":   http.StatusServiceUnavailable,
	"database_unavailable":  http.StatusServiceUnavailable,
	"internal_error":        http.StatusInternalServerError,
	"insufficient_storage":  http.StatusInsufficientStorage, // a full disk, named in the message (DiskFull)
	// The console's JSON key API.
	"unauthenticated":     http.StatusUnauthorized,
	"csrf_failed":         http.StatusForbidden,
	"owner_required":      http.StatusForbidden,
	"workspace_not_found": http.StatusNotFound,
	"key_not_found":       http.StatusNotFound,
	"invalid_body":        http.StatusBadRequest,
	"invalid_name":        http.StatusBadRequest,
	// The pod's probes and git-flush.
	"not_ready":     http.StatusServiceUnavailable,
	"invalid_tag":   http.StatusBadRequest,
	"fenced":        http.StatusConflict,
	"tag_exists":    http.StatusConflict,
	"shutting_down": http.StatusServiceUnavailable,
	"not_persisted": http.StatusServiceUnavailable,
	"flush_timeout": http.StatusServiceUnavailable,
	// The pod's rollback (docs/sync-modes.md §6).
	"invalid_sha":      http.StatusBadRequest,
	"commit_not_found": http.StatusNotFound,
	// The pod's webhook channel.
	"agent_not_ready":            http.StatusServiceUnavailable,
	"reply_timeout":              http.StatusGatewayTimeout,
	"channel_not_found":          http.StatusNotFound,
	"channel_config_unavailable": http.StatusServiceUnavailable,
	"channel_secret_not_set":     http.StatusUnauthorized,
	"invalid_webhook_secret":     http.StatusUnauthorized,
	"journal_unavailable":        http.StatusServiceUnavailable,
}
