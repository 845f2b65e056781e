package wire_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/svc-dev/svc/shared/wire"
)

// Write is where both binaries' errors become responses: headers, status,
// the envelope (none to HEAD), and a log line with the cause for 5xx only.
func TestWrite(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, method string
		err          *wire.Error
		wantBody     string
		wantLogs     int
	}{
		{"4xx", http.MethodPost, &wire.Error{Status: 429, Code: "rate_limited", Message: "slow down", Headers: map[string]string{"Retry-After": "3"}},
			`{"error":{"message":"slow down","type":"rate_limit_error","code":"rate_limited"}}` + "\n", 0},
		{"5xx logged", http.MethodGet, &wire.Error{Status: 503, Code: "service_unavailable", Message: "retry", Headers: map[string]string{"Retry-After": "3"}},
			`{"error":{"message":"retry","type":"server_error","code":"service_unavailable"}}` + "\n", 1},
		{"HEAD has no body", http.MethodHead, &wire.Error{Status: 429, Code: "rate_limited", Message: "slow down", Headers: map[string]string{"Retry-After": "3"}}, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			core, logs := observer.New(zapcore.DebugLevel)
			rec := httptest.NewRecorder()
			tc.err.Write(rec, httptest.NewRequest(tc.method, "/x", nil), "/x", errors.New("cause"), zap.New(core))
			if rec.Code != tc.err.Status || rec.Body.String() != tc.wantBody || rec.Header().Get("Retry-After") != "3" {
				t.Fatalf("answer %d %q %v", rec.Code, rec.Body, rec.Header())
			}
			if tc.wantBody != "" && rec.Header().Get("Content-Type") != "application/json" {
				t.Fatalf("content type %q", rec.Header().Get("Content-Type"))
			}
			if logs.Len() != tc.wantLogs {
				t.Fatalf("%d log lines, want %d", logs.Len(), tc.wantLogs)
			}
		})
	}
}
