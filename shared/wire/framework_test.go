package wire

import (
	"errors"
	"net/http"
	"testing"
)

// Every status a framework answers maps to a declared code of that status;
// a 5xx hides its cause; an unlisted 4xx keeps its status.
func TestFramework(t *testing.T) {
	t.Parallel()
	for status, code := range frameworkCodes {
		if spec, ok := Codes[code]; !ok || spec.Status != status {
			t.Errorf("status %d maps to %q, not a declared code of that status", status, code)
		}
		if e := Framework(status, "", nil); e.Status != status || e.Code != code || e.Message == "" {
			t.Errorf("Framework(%d) = %+v", status, e)
		}
	}
	if e := Framework(http.StatusNotFound, "Not Found", nil); e.Message != "Not Found" {
		t.Errorf("message not kept: %+v", e)
	}
	cause := errors.New("secret detail")
	if e := Framework(http.StatusServiceUnavailable, "down", cause); e.Status != 500 || e.Code != "internal_error" || e.Message == "down" || !errors.Is(e, cause) {
		t.Errorf("Framework(503) = %+v", e)
	}
	if e := Framework(http.StatusRequestTimeout, "slow", nil); e.Status != http.StatusRequestTimeout || e.Code != "invalid_request" || e.Type != TypeInvalidRequest {
		t.Errorf("Framework(408) = %+v", e)
	}
}
