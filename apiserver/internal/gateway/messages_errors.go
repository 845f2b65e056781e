package gateway

import (
	"encoding/json"
	"net/http"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/apierr"
)

// anthErrorBody is Anthropic's error envelope. resets_at (402) is ours,
// an extra field the SDKs keep.
type anthErrorBody struct {
	Type      string          `json:"type"`
	Error     anthErrorDetail `json:"error"`
	RequestID string          `json:"request_id,omitempty"`
}

type anthErrorDetail struct {
	Type     string `json:"type"`
	Message  string `json:"message"`
	ResetsAt string `json:"resets_at,omitempty"`
}

// anthErrorType is Anthropic's error type for a status.
func anthErrorType(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusPaymentRequired:
		return "billing_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	case 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// AnthropicErrors is the middleware of the Messages routes, between Observe
// and authentication: every error of the route (authentication, plan, tier,
// windows, rate limits, upstream) is written in Anthropic's envelope with
// the same status and headers the other wire formats get.
func (a *API) AnthropicErrors(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		err := next(c)
		if err == nil || c.Response().Committed {
			return err
		}
		e := apierr.From(err)
		if e.Status >= 500 && a.Log != nil {
			a.Log.Error("request failed", zap.String("method", c.Request().Method), zap.String("path", c.Path()),
				zap.Int("status", e.Status), zap.String("code", e.Code), zap.Error(err))
		}
		h := c.Response().Header()
		for k, v := range e.Headers {
			h.Set(k, v)
		}
		body, _ := json.Marshal(anthErrorBody{Type: "error", RequestID: h.Get(echo.HeaderXRequestID),
			Error: anthErrorDetail{Type: anthErrorType(e.Status), Message: e.Message, ResetsAt: e.ResetsAt}})
		return c.JSONBlob(e.Status, body)
	}
}
