// Package apierr is the API server's side of the one error vocabulary
// (shared/wire: the code table Codes, the constructor Coded, the envelope;
// docs/errors.md): the one place an error becomes an HTTP response, the
// envelope of spec 2.3 ({"error": {message, type, code}}) with status and
// type per spec 7. Handlers and domain packages return *wire.Error built
// by wire.Coded (or any error, which becomes a logged 500 with no
// details); this package holds the constructors whose message needs
// arguments.
package apierr

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/wire"
)

// Constructors for the catalog's codes of spec 7.1 (the common ones —
// InvalidAPIKey, UsageLimitReached, RateLimited, Unavailable, Internal —
// are in shared/wire, for domain packages to return).

func ModelNotFound(model string) *wire.Error {
	return wire.Coded(wire.CodeModelNotFound,
		fmt.Sprintf("The model %q does not exist or you do not have access to it.", model))
}

func ModelTierRestricted(model, tier string) *wire.Error {
	return wire.Coded(wire.CodeModelTierRestricted,
		fmt.Sprintf("Your plan does not include the %s tier required by model %q. Upgrade your plan to use it.", tier, model))
}

// PlanNotFound is a workspace whose plan this server's plans file does not
// define (an operator's mistake: a clear 403, not a 500).
func PlanNotFound(plan string) *wire.Error {
	return wire.Coded(wire.CodePlanNotFound, fmt.Sprintf("Your workspace's plan %q is not offered by this server, so no model can be "+
		"used. Ask an operator to set a plan from the server's plans file (apiserver admin workspace set --plan).", plan))
}

// From converts any error to *wire.Error: echo's own errors become the
// declared code of their status (wire.Framework, as the pod's poderr does);
// a 401 of the framework is the API key's.
func From(err error) *wire.Error {
	var e *wire.Error
	if errors.As(err, &e) {
		return e.Resolve(wire.Statuses)
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		msg, _ := he.Message.(string)
		switch he.Code {
		case http.StatusRequestEntityTooLarge:
			msg = "Request body too large."
		case http.StatusUnauthorized:
			return wire.InvalidAPIKey()
		}
		return wire.Framework(he.Code, msg, err)
	}
	return wire.Internal(err)
}

// Handler is echo's HTTPErrorHandler: the one place errors become responses.
func Handler(log *zap.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if !c.Response().Committed {
			From(err).Write(c.Response(), c.Request(), c.Path(), err, log)
		}
	}
}
