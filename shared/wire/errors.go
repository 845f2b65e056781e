package wire

import (
	"encoding/json"
	"fmt"
	"net/http"

	"go.uber.org/zap"
)

// The type words of the error envelope (spec 2.3, 7; docs/design.md §6).
// Both binaries use only these: a webhook caller sees the pod's errors
// through the agent-proxy and the API's own alike.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeAuthentication = "authentication_error"
	TypePermission     = "permission_error"
	TypeBilling        = "billing_error"
	TypeRateLimit      = "rate_limit_error"
	TypeServer         = "server_error"
)

// ErrorBody is the JSON body of every error of both binaries: the envelope
// of spec 2.3.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inside of ErrorBody. The optional fields are set by
// the errors that carry them: resets_at (402 usage_limit_reached),
// correlationId and channelId (webhook routes).
type ErrorDetail struct {
	Message       string `json:"message"`
	Type          string `json:"type"`
	Code          string `json:"code"`
	ResetsAt      string `json:"resets_at,omitempty"`
	CorrelationID string `json:"correlationId,omitempty"`
	ChannelID     string `json:"channelId,omitempty"`
}

// Error is the coded error business code returns, built by Coded (status
// and type from the one code table, Codes) or Relayed (an answer received
// from elsewhere). Code is the envelope's code. A literal &Error{Code,
// Message} (no Status or Type: codecheck refuses those) is resolved
// against Codes when it is written.
type Error struct {
	Status  int
	Type    string
	Code    string
	Message string
	// ResetsAt, CorrelationID and ChannelID go into the envelope when set.
	ResetsAt      string
	CorrelationID string
	ChannelID     string
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

// Resolve returns a copy of e with Status taken from table (a code missing
// from it is a 500) and Type from the status, when they are unset. e itself
// is not changed (errors may be shared values).
func (e *Error) Resolve(table map[string]int) *Error {
	r := *e
	if r.Status == 0 {
		r.Status = table[r.Code]
		if r.Status == 0 {
			r.Status = http.StatusInternalServerError
		}
	}
	if r.Type == "" {
		if s, ok := Codes[r.Code]; ok && s.Status == r.Status {
			r.Type = s.Type
		} else {
			r.Type = TypeFor(r.Status)
		}
	}
	return &r
}

// Body is the envelope of e.
func (e *Error) Body() ErrorBody {
	typ := e.Type
	if typ == "" {
		typ = TypeFor(e.Status)
	}
	return ErrorBody{Error: ErrorDetail{Message: e.Message, Type: typ, Code: e.Code, ResetsAt: e.ResetsAt,
		CorrelationID: e.CorrelationID, ChannelID: e.ChannelID}}
}

// Write answers e — resolved against the binary's table — on w for r: a
// 5xx is logged first with cause (the details the answer leaves out), then
// e's headers, its status and, except to HEAD, the envelope as JSON. Both
// binaries' error writers (apierr, poderr) end here.
func (e *Error) Write(w http.ResponseWriter, r *http.Request, route string, cause error, log *zap.Logger) {
	if e.Status >= 500 && log != nil {
		log.Error("request failed", zap.String("method", r.Method), zap.String("path", route),
			zap.Int("status", e.Status), zap.String("code", e.Code), zap.Error(cause))
	}
	for k, v := range e.Headers {
		w.Header().Set(k, v)
	}
	if r.Method == http.MethodHead {
		w.WriteHeader(e.Status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(e.Body())
}

// TypeFor is the type word of an HTTP status (docs/design.md §6): 401
// authentication, 402 billing, 403 permission, 429 rate limit, 5xx server,
// every other 4xx invalid request.
func TypeFor(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return TypeAuthentication
	case status == http.StatusPaymentRequired:
		return TypeBilling
	case status == http.StatusForbidden:
		return TypePermission
	case status == http.StatusTooManyRequests:
		return TypeRateLimit
	case status >= 500:
		return TypeServer
	}
	return TypeInvalidRequest
}
