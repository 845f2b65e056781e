package apierr_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/apiserver/internal/apierr"
	"github.com/svc-dev/svc/shared/wire"
)

// Handler is the API server's one place errors become answers:
// a coded error with its code's status and type from wire.Codes,
// a relayed answer with the status received, echo's own errors with theirs,
// anything else a 500 that tells nothing of its cause.
func TestHandlerWritesTheEnvelope(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		err    error
		status int
		typ    string
		code   string
		header string
	}{
		{"coded", wire.Coded("fenced", "another pod owns it"), 409, wire.TypeInvalidRequest, "fenced", ""},
		{"coded, billing on 403", apierr.ModelTierRestricted("m", "pro"), 403, wire.TypeBilling, "model_tier_restricted", ""},
		{"wrapped coded", errors.Join(errors.New("ctx"), wire.Coded("agent_unavailable", "")), 503, wire.TypeServer, "agent_unavailable", ""},
		{"rate limited", wire.RateLimited(2*time.Second, nil), 429, wire.TypeRateLimit, "rate_limited", "Retry-After"},
		{"unavailable", wire.Unavailable(errors.New("db down")), 503, wire.TypeServer, "service_unavailable", "Retry-After"},
		{"relayed provider 4xx", wire.Relayed(422, wire.ErrorDetail{Code: "upstream_rejected", Message: "no"}), 422, wire.TypeInvalidRequest, "upstream_rejected", ""},
		{"echo 404", echo.ErrNotFound, 404, wire.TypeInvalidRequest, "not_found", ""},
		{"echo 405", echo.ErrMethodNotAllowed, 405, wire.TypeInvalidRequest, "method_not_allowed", ""},
		{"echo 413", echo.ErrStatusRequestEntityTooLarge, 413, wire.TypeInvalidRequest, "request_too_large", ""},
		{"echo 415", echo.ErrUnsupportedMediaType, 415, wire.TypeInvalidRequest, "unsupported_media_type", ""},
		{"echo 401", echo.ErrUnauthorized, 401, wire.TypeAuthentication, "invalid_api_key", ""},
		{"anything else", errors.New("secret detail"), 500, wire.TypeServer, "internal_error", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := echo.New()
			rec := httptest.NewRecorder()
			c := e.NewContext(httptest.NewRequest(http.MethodPost, "/x", nil), rec)
			apierr.Handler(nil)(tc.err, c)
			var body wire.ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Header().Get("Content-Type") != "application/json" {
				t.Fatalf("not the envelope: %d %s", rec.Code, rec.Body)
			}
			if rec.Code != tc.status || body.Error.Type != tc.typ || body.Error.Code != tc.code || body.Error.Message == "" {
				t.Fatalf("got %d %s, want %d %s %s", rec.Code, rec.Body, tc.status, tc.typ, tc.code)
			}
			if tc.header != "" && rec.Header().Get(tc.header) == "" {
				t.Fatalf("no %s header", tc.header)
			}
			if strings.Contains(rec.Body.String(), "secret detail") || strings.Contains(rec.Body.String(), "db down") {
				t.Fatalf("a cause was sent: %s", rec.Body)
			}
		})
	}
}
