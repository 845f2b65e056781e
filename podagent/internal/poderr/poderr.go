// Package poderr is the pod's side of the one error vocabulary
// (shared/wire): its code → status table and the one function that writes
// an error as the envelope of spec 2.3. The /agent/git-flush, probe and
// webhook routes all answer through it, so a webhook caller sees the same
// type words from the pod as from the API's agent-proxy.
package poderr

import (
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/wire"
)

// Error is the coded error of shared/wire.
type Error = wire.Error

// Statuses is the pod's one table from error codes to HTTP statuses.
var Statuses = map[string]int{
	// probes and git-flush
	"not_ready":             http.StatusServiceUnavailable,
	"invalid_runtime_token": http.StatusUnauthorized,
	"invalid_body":          http.StatusBadRequest,
	"invalid_tag":           http.StatusBadRequest,
	"fenced":                http.StatusConflict,
	"tag_exists":            http.StatusConflict,
	"shutting_down":         http.StatusServiceUnavailable,
	"not_persisted":         http.StatusServiceUnavailable,
	"flush_timeout":         http.StatusServiceUnavailable,
	// rollback (docs/sync-modes.md §6)
	"invalid_sha":      http.StatusBadRequest,
	"commit_not_found": http.StatusNotFound,
	// webhook channel
	"request_too_large":          http.StatusRequestEntityTooLarge,
	"agent_not_ready":            http.StatusServiceUnavailable,
	"reply_timeout":              http.StatusGatewayTimeout,
	"channel_not_found":          http.StatusNotFound,
	"channel_config_unavailable": http.StatusServiceUnavailable,
	"channel_secret_not_set":     http.StatusUnauthorized,
	"invalid_webhook_secret":     http.StatusUnauthorized,
	"journal_unavailable":        http.StatusServiceUnavailable,
	"internal_error":             http.StatusInternalServerError,
}

// New is a coded error whose status comes from Statuses.
func New(code, msg string) *Error { return &Error{Code: code, Message: msg} }

// From converts any error: a coded error is resolved against Statuses,
// echo's own errors keep their status, anything else is a 500 whose details
// are logged and not sent.
func From(err error) *Error {
	var e *Error
	var he *echo.HTTPError
	switch {
	case errors.As(err, &e):
		return e.Resolve(Statuses)
	case errors.As(err, &he):
		msg := http.StatusText(he.Code)
		if m, ok := he.Message.(string); ok {
			msg = m
		}
		return (&Error{Status: he.Code, Code: strings.ToLower(strings.ReplaceAll(http.StatusText(he.Code), " ", "_")),
			Message: msg}).Resolve(Statuses)
	}
	return (&Error{Code: "internal_error", Message: "Internal error.", Cause: err}).Resolve(Statuses)
}

// Write answers err as the envelope (HEAD gets the status only) and logs
// 5xx with their cause.
func Write(c echo.Context, err error, log *zap.Logger) {
	if !c.Response().Committed {
		From(err).Write(c.Response(), c.Request(), c.Path(), err, log)
	}
}

// Handler is echo's HTTPErrorHandler for the pod.
func Handler(log *zap.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) { Write(c, err, log) }
}
