// Package apierr is the one error type of the API server and the one place it
// becomes an HTTP response: the envelope of spec 2.3 ({"error": {message,
// type, code}}) with status and type per spec 7 and DESIGN.md §6. Handlers
// return *Error (or any error, which becomes a logged 500 with no details).
package apierr

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"
)

// Error types of the envelope.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeAuthentication = "authentication_error"
	TypePermission     = "permission_error"
	TypeBilling        = "billing_error"
	TypeRateLimit      = "rate_limit_error"
	TypeServer         = "server_error"
)

// Error is an HTTP error with the envelope's fields.
type Error struct {
	Status  int
	Type    string
	Code    string
	Message string
	// Extra fields merged into the error object (e.g. resets_at, correlationId).
	Extra map[string]any
	// Headers set on the response (e.g. Retry-After).
	Headers map[string]string
	// Cause is logged for 5xx, never sent.
	Cause error
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return fmt.Sprintf("%d %s: %s: %v", e.Status, e.Code, e.Message, e.Cause)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Cause }

// New builds an error.
func New(status int, typ, code, msg string) *Error {
	return &Error{Status: status, Type: typ, Code: code, Message: msg}
}

// Constructors for the codes of spec 7.1 and the common cases.

func InvalidAPIKey() *Error {
	return New(http.StatusUnauthorized, TypeAuthentication, "invalid_api_key",
		"Invalid API key. Pass a service API key (svc_sk_…) as 'Authorization: Bearer <key>'.")
}

func ModelNotFound(model string) *Error {
	return New(http.StatusNotFound, TypeInvalidRequest, "model_not_found",
		fmt.Sprintf("The model %q does not exist or you do not have access to it.", model))
}

func ModelTierRestricted(model, tier string) *Error {
	return New(http.StatusForbidden, TypeBilling, "model_tier_restricted",
		fmt.Sprintf("Your plan does not include the %s tier required by model %q. Upgrade your plan to use it.", tier, model))
}

func UsageLimitReached(window string, resetsAt time.Time) *Error {
	e := New(http.StatusPaymentRequired, TypeBilling, "usage_limit_reached",
		fmt.Sprintf("Your workspace is out of included usage for the %s window. Enable usage-based pricing or upgrade your plan.", window))
	e.Extra = map[string]any{"resets_at": resetsAt.UTC().Format(time.RFC3339)}
	return e
}

func RateLimited(retryAfter time.Duration, headers map[string]string) *Error {
	secs := int((retryAfter + time.Second - 1) / time.Second)
	if secs < 1 {
		secs = 1
	}
	e := New(http.StatusTooManyRequests, TypeRateLimit, "rate_limited",
		fmt.Sprintf("Too many requests. Retry after %d seconds.", secs))
	e.Headers = map[string]string{"Retry-After": strconv.Itoa(secs)}
	for k, v := range headers {
		e.Headers[k] = v
	}
	return e
}

func BadRequest(code, msg string) *Error {
	return New(http.StatusBadRequest, TypeInvalidRequest, code, msg)
}

func Forbidden(code, msg string) *Error {
	return New(http.StatusForbidden, TypePermission, code, msg)
}

func NotFound(code, msg string) *Error {
	return New(http.StatusNotFound, TypeInvalidRequest, code, msg)
}

// Unavailable is a dependency outage (database, storage): 503 with a short
// Retry-After, details logged and not sent.
func Unavailable(cause error) *Error {
	e := New(http.StatusServiceUnavailable, TypeServer, "service_unavailable",
		"The service is temporarily unavailable; retry shortly.")
	e.Headers = map[string]string{"Retry-After": "1"}
	e.Cause = cause
	return e
}

func Internal(cause error) *Error {
	e := New(http.StatusInternalServerError, TypeServer, "internal_error", "Internal server error.")
	e.Cause = cause
	return e
}

// Envelope is the JSON body of every error (spec 2.3).
type Envelope struct {
	Error map[string]any `json:"error"`
}

// Body returns the envelope of e.
func (e *Error) Body() Envelope {
	m := map[string]any{"message": e.Message, "type": e.Type, "code": e.Code}
	for k, v := range e.Extra {
		m[k] = v
	}
	return Envelope{Error: m}
}

// From converts any error to *Error: echo's own errors keep their status.
func From(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		msg := http.StatusText(he.Code)
		if s, ok := he.Message.(string); ok {
			msg = s
		}
		switch he.Code {
		case http.StatusRequestEntityTooLarge:
			return New(he.Code, TypeInvalidRequest, "request_too_large", "Request body too large.")
		case http.StatusNotFound:
			return New(he.Code, TypeInvalidRequest, "not_found", msg)
		case http.StatusMethodNotAllowed:
			return New(he.Code, TypeInvalidRequest, "method_not_allowed", msg)
		case http.StatusUnauthorized:
			return InvalidAPIKey()
		}
		if he.Code >= 500 {
			return Internal(err)
		}
		return New(he.Code, TypeInvalidRequest, "invalid_request", msg)
	}
	return Internal(err)
}

// Handler is echo's HTTPErrorHandler: the one place errors become responses.
func Handler(log *zap.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		e := From(err)
		if e.Status >= 500 {
			log.Error("request failed", zap.String("method", c.Request().Method),
				zap.String("path", c.Path()), zap.Int("status", e.Status), zap.Error(err))
		}
		for k, v := range e.Headers {
			c.Response().Header().Set(k, v)
		}
		if c.Request().Method == http.MethodHead {
			_ = c.NoContent(e.Status)
			return
		}
		_ = c.JSON(e.Status, e.Body())
	}
}
