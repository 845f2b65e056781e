package wire

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

// Every row of the one code table is well formed: a snake_case code, an
// error status, one of the six type words — the status's own (TypeFor)
// except the plan matters answered 403 as billing (docs/errors.md) — and a
// default message.
func TestCodeTable(t *testing.T) {
	t.Parallel()
	snake := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	words := map[string]bool{TypeInvalidRequest: true, TypeAuthentication: true, TypePermission: true,
		TypeBilling: true, TypeRateLimit: true, TypeServer: true}
	billing403 := map[string]bool{"model_tier_restricted": true, "plan_not_found": true}
	for code, s := range Codes {
		switch {
		case !snake.MatchString(code):
			t.Errorf("%q: not snake_case", code)
		case s.Status < 400 || s.Status > 599:
			t.Errorf("%q: status %d is not an error status", code, s.Status)
		case !words[s.Type]:
			t.Errorf("%q: type %q is not one of the envelope's type words", code, s.Type)
		case s.Type != TypeFor(s.Status) && !billing403[code]:
			t.Errorf("%q: type %q, but status %d is %q", code, s.Type, s.Status, TypeFor(s.Status))
		case strings.TrimSpace(s.Message) == "":
			t.Errorf("%q: no default message", code)
		}
		if Statuses[code] != s.Status {
			t.Errorf("Statuses[%q] = %d, want %d", code, Statuses[code], s.Status)
		}
	}
}

// Coded takes the status and type from the table and the default message
// when given none; an undeclared code is a 500 whose cause names it.
// Relayed keeps a received status.
func TestCodedAndRelayed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                  string
		err                   *Error
		status                int
		typ, code, msg, cause string
	}{
		{"declared", Coded("fenced", "another pod"), 409, TypeInvalidRequest, "fenced", "another pod", ""},
		{"default message", Coded("not_found", ""), 404, TypeInvalidRequest, "not_found", "Not found.", ""},
		{"billing on 403", Coded("plan_not_found", "x"), 403, TypeBilling, "plan_not_found", "x", ""},
		{"undeclared", Coded("no_such_code", "x"), 500, TypeServer, "internal_error", "Internal server error.", "no_such_code"},
		{"relayed 4xx", Relayed(422, ErrorDetail{Code: "upstream_rejected", Message: "bad"}), 422, TypeInvalidRequest, "upstream_rejected", "bad", ""},
		{"relayed keeps type", Relayed(403, ErrorDetail{Type: TypeBilling, Code: "model_tier_restricted", Message: "m"}), 403, TypeBilling, "model_tier_restricted", "m", ""},
		{"relayed, table type at its status", Relayed(403, ErrorDetail{Code: "plan_not_found", Message: "m"}), 403, TypeBilling, "plan_not_found", "m", ""},
	} {
		e := tc.err
		if e.Status != tc.status || e.Type != tc.typ || e.Code != tc.code || e.Message != tc.msg {
			t.Errorf("%s: %+v", tc.name, e)
		}
		if tc.cause != "" && (e.Cause == nil || !strings.Contains(e.Cause.Error(), tc.cause)) {
			t.Errorf("%s: cause %v does not name %q", tc.name, e.Cause, tc.cause)
		}
		if tc.cause == "" && e.Cause != nil {
			t.Errorf("%s: unexpected cause %v", tc.name, e.Cause)
		}
	}
	if e := InsufficientStorage("the disk", errors.New("ENOSPC")); e.Status != 507 || e.Code != "insufficient_storage" || e.Cause == nil {
		t.Errorf("InsufficientStorage: %+v", e)
	}
}
