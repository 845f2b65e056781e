package pairedmachine

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// The session call is retried while the API fails (a 503 twice here), not
// when the token is refused, and gives up with the last failure once its
// limit has passed.
func TestSessionWithRetry(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		failures  int32 // 503s before the session is answered
		status    int   // the answer after them
		limit     time.Duration
		wantErr   string // "" : the session
		wantCalls int32  // 0: at least failures+1
	}{
		{name: "transient failures", failures: 2, status: http.StatusOK, limit: time.Minute},
		{name: "refused token", status: http.StatusUnauthorized, limit: time.Minute, wantErr: ErrUnauthorized.Error(), wantCalls: 1},
		{name: "down past the limit", failures: 1 << 30, limit: 600 * time.Millisecond, wantErr: "503"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) <= tc.failures {
					http.Error(w, "starting", http.StatusServiceUnavailable)
					return
				}
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(`{"projectId":"prj_1","cloudSyncMode":"git_only","runtimeToken":"svc_rt_x"}`))
			}))
			defer srv.Close()
			c := &Client{APIURL: srv.URL, Token: goodToken, Log: zaptest.NewLogger(t)}
			s, err := sessionWithRetry(context.Background(), c, tc.limit)
			if tc.wantErr == "" {
				if err != nil || s.ProjectID != "prj_1" || calls.Load() != tc.failures+1 {
					t.Fatalf("session %+v, %v after %d calls", s, err, calls.Load())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			if tc.wantCalls != 0 && calls.Load() != tc.wantCalls {
				t.Fatalf("%d calls, want %d", calls.Load(), tc.wantCalls)
			}
			if errors.Is(err, ErrUnauthorized) != (tc.status == http.StatusUnauthorized) {
				t.Fatalf("err = %v", err)
			}
		})
	}
}
