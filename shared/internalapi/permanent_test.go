package internalapi

import (
	"errors"
	"fmt"
	"testing"

	"github.com/svc-dev/svc/shared/wire"
)

func TestPermanent(t *testing.T) {
	t.Parallel()
	status := func(code int, errCode string) error {
		return fmt.Errorf("wrapped: %w", &StatusError{Op: "put", Status: code, Body: wire.ErrorBody{Error: wire.ErrorDetail{Code: errCode}}})
	}
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"invalid payload", status(400, "invalid_body"), true},
		{"too large", status(413, "request_too_large"), true},
		{"unprocessable", status(422, ""), true},
		{"404 naming what is missing", status(404, "channel_not_found"), true},
		{"404 of an API without the route", status(404, ""), false},
		{"stale token", status(401, "invalid_runtime_token"), false},
		{"rate limited", status(429, "rate_limited"), false},
		{"server error", status(503, "service_unavailable"), false},
		{"network", errors.New("connection refused"), false},
		{"nil", nil, false},
	}
	for _, tc := range cases {
		if got := Permanent(tc.err); got != tc.want {
			t.Errorf("%s: Permanent = %v, want %v", tc.name, got, tc.want)
		}
	}
}
