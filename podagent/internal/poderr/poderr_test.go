package poderr_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/podagent/internal/poderr"
	"github.com/svc-dev/svc/shared/wire"
)

// Write is the pod's one error writer: a coded error with its code's
// status and type (wire.Codes), echo's own errors with their status, a full
// disk as 507 insufficient_storage, anything else a 500 without its cause.
func TestWriteAnswersTheEnvelope(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		err    error
		status int
		typ    string
		code   string
	}{
		{"coded", wire.Coded("tag_exists", "v1 exists"), 409, wire.TypeInvalidRequest, "tag_exists"},
		{"literal resolved", &wire.Error{Code: "agent_not_ready", Message: "starting"}, 503, wire.TypeServer, "agent_not_ready"},
		{"echo 404", echo.ErrNotFound, 404, wire.TypeInvalidRequest, "not_found"},
		{"echo 415", echo.ErrUnsupportedMediaType, 415, wire.TypeInvalidRequest, "unsupported_media_type"},
		{"full disk", fmt.Errorf("git add: %w", syscall.ENOSPC), 507, wire.TypeServer, "insufficient_storage"},
		{"anything else", errors.New("secret detail"), 500, wire.TypeServer, "internal_error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := httptest.NewRecorder()
			c := echo.New().NewContext(httptest.NewRequest(http.MethodPost, "/agent/git-flush", nil), rec)
			poderr.Write(c, tc.err, nil)
			var body wire.ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("not the envelope: %d %s", rec.Code, rec.Body)
			}
			if rec.Code != tc.status || body.Error.Type != tc.typ || body.Error.Code != tc.code || body.Error.Message == "" ||
				body.Error.Message == "secret detail" {
				t.Fatalf("got %d %s, want %d %s %s", rec.Code, rec.Body, tc.status, tc.typ, tc.code)
			}
		})
	}
}
