// Package poderr is the pod's side of the one error vocabulary
// (shared/wire: the code table Codes, the constructor Coded, the envelope;
// docs/errors.md): the one function that writes an error as the envelope
// of spec 2.3. The /agent/git-flush, probe and webhook routes all answer
// through it, so a webhook caller sees the same type words from the pod as
// from the API's agent-proxy.
package poderr

import (
	"errors"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/wire"
)

// From converts any error: a coded error is resolved against wire.Codes,
// echo's own errors become the declared code of their status
// (wire.Framework, as the API server's apierr does), a full disk is
// DiskFull, anything else is a 500 whose details are logged and not sent.
func From(err error) *wire.Error {
	var e *wire.Error
	var he *echo.HTTPError
	switch {
	case errors.As(err, &e):
		return e.Resolve(wire.Statuses)
	case errors.As(err, &he):
		msg, _ := he.Message.(string)
		return wire.Framework(he.Code, msg, err)
	}
	if wire.DiskFull(err) {
		return DiskFull(err)
	}
	return wire.Internal(err)
}

// DiskFull is the 507 insufficient_storage of a full workspace disk (the
// pod's only disk: the work tree and its .git); the turn's changes stay
// in the work tree and the next turn commits them once space is freed.
func DiskFull(cause error) *wire.Error {
	return wire.InsufficientStorage("the pod's workspace disk (SVC_WORKSPACE_DIR)", cause)
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
