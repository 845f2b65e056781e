package internalapi

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/svc-dev/svc/shared/wire"
)

func TestPermanent(t *testing.T) {
	t.Parallel()
	status := func(code int, errCode string) error {
		return fmt.Errorf("put outbox: %w", &StatusError{Op: "put", Status: code, Body: wire.ErrorBody{Error: wire.ErrorDetail{Code: errCode}}})
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"invalid payload", status(400, wire.CodeInvalidOutboxMessage), true},
		{"too large", status(413, wire.CodeRequestTooLarge), true},
		{"unprocessable", status(422, wire.CodeInvalidObject), true},
		{"the channel is not the project's", status(404, wire.CodeChannelNotFound), true},
		{"a route the API does not serve yet", status(404, wire.CodeNotFound), false},
		{"a 404 without an envelope", status(404, ""), false},
		{"server error", status(500, wire.CodeInternalError), false},
		{"unavailable", status(503, wire.CodeServiceUnavailable), false},
		{"rate limited", status(429, wire.CodeRateLimited), false},
		{"token being rotated", status(401, wire.CodeInvalidRuntimeToken), false},
		{"fenced", status(409, wire.CodeFenced), false},
		{"network", errors.New("connection refused"), false},
		{"cancelled", context.Canceled, false},
		{"nil", nil, false},
	} {
		if got := Permanent(tc.err); got != tc.want {
			t.Errorf("%s: Permanent = %v, want %v", tc.name, got, tc.want)
		}
	}
}
