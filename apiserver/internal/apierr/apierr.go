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
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/wire"
)

// Constructors for the codes of spec 7.1 and the common cases.

func InvalidAPIKey() *wire.Error {
	return wire.Coded("invalid_api_key",
		"Invalid API key. Pass a service API key (svc_sk_…) as 'Authorization: Bearer <key>'.")
}

func ModelNotFound(model string) *wire.Error {
	return wire.Coded("model_not_found",
		fmt.Sprintf("The model %q does not exist or you do not have access to it.", model))
}

func ModelTierRestricted(model, tier string) *wire.Error {
	return wire.Coded("model_tier_restricted",
		fmt.Sprintf("Your plan does not include the %s tier required by model %q. Upgrade your plan to use it.", tier, model))
}

// PlanNotFound is a workspace whose plan this server's plans file does not
// define (an operator's mistake: a clear 403, not a 500).
func PlanNotFound(plan string) *wire.Error {
	return wire.Coded("plan_not_found", fmt.Sprintf("Your workspace's plan %q is not offered by this server, so no model can be "+
		"used. Ask an operator to set a plan from the server's plans file (apiserver admin workspace set --plan).", plan))
}

func UsageLimitReached(window string, resetsAt time.Time) *wire.Error {
	e := wire.Coded("usage_limit_reached",
		fmt.Sprintf("Your workspace is out of included usage for the %s window. Enable usage-based pricing or upgrade your plan.", window))
	e.ResetsAt = resetsAt.UTC().Format(time.RFC3339)
	return e
}

func RateLimited(retryAfter time.Duration, headers map[string]string) *wire.Error {
	secs := int((retryAfter + time.Second - 1) / time.Second)
	if secs < 1 {
		secs = 1
	}
	e := wire.Coded("rate_limited",
		fmt.Sprintf("Too many requests. Retry after %d seconds.", secs))
	e.Headers = map[string]string{"Retry-After": strconv.Itoa(secs)}
	for k, v := range headers {
		e.Headers[k] = v
	}
	return e
}

// Unavailable is a dependency outage (database, storage): 503 with a short
// Retry-After, details logged and not sent.
func Unavailable(cause error) *wire.Error {
	e := wire.Coded("service_unavailable",
		"The service is temporarily unavailable; retry shortly.")
	e.Headers = map[string]string{"Retry-After": "1"}
	e.Cause = cause
	return e
}

func Internal(cause error) *wire.Error {
	e := wire.Coded("internal_error", "Internal server error.")
	e.Cause = cause
	return e
}

// From converts any error to *wire.Error: echo's own errors keep their status.
func From(err error) *wire.Error {
	var e *wire.Error
	if errors.As(err, &e) {
		return e.Resolve(wire.Statuses)
	}
	// echo's own errors: the framework's status is relayed.
	var he *echo.HTTPError
	if errors.As(err, &he) {
		msg := http.StatusText(he.Code)
		if s, ok := he.Message.(string); ok {
			msg = s
		}
		switch he.Code {
		case http.StatusRequestEntityTooLarge:
			return wire.Coded("request_too_large", "Request body too large.")
		case http.StatusNotFound:
			return wire.Coded("not_found", msg)
		case http.StatusMethodNotAllowed:
			return wire.Coded("method_not_allowed", msg)
		case http.StatusUnauthorized:
			return InvalidAPIKey()
		}
		if he.Code >= 500 {
			return Internal(err)
		}
		return wire.Relayed(he.Code, wire.ErrorDetail{Type: wire.TypeInvalidRequest, Code: "invalid_request", Message: msg})
	}
	return Internal(err)
}

// Handler is echo's HTTPErrorHandler: the one place errors become responses.
func Handler(log *zap.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if !c.Response().Committed {
			From(err).Write(c.Response(), c.Request(), c.Path(), err, log)
		}
	}
}
