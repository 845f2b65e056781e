// Package servertest starts the whole API server in process for handler
// tests (as coder's coderdtest.New): server.New's real route table,
// middleware and error handler behind an httptest server, so a handler test
// exercises the same wiring production does instead of its own echo.
package servertest

import (
	"context"
	"net/http/httptest"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/apiserver/internal/server"
)

// RuntimeSecret is the runtime-auth secret of servers whose Deps leave it
// empty.
const RuntimeSecret = "servertest-runtime-secret"

// Server is a running in-process API server.
type Server struct {
	*server.Server
	// URL is the base URL (http://127.0.0.1:port).
	URL  string
	Deps server.Deps
}

// New starts server.New(d) and stops it when the test ends. d.Store is
// required; a nil Log becomes the test's logger and an empty RuntimeSecret
// becomes RuntimeSecret.
func New(t testing.TB, d server.Deps) *Server {
	t.Helper()
	if d.Store == nil {
		t.Fatal("servertest.New: Deps.Store is required")
	}
	if d.Log == nil {
		d.Log = zap.NewNop()
		if tt, ok := t.(*testing.T); ok {
			d.Log = zaptest.NewLogger(tt)
		}
	}
	if len(d.RuntimeSecret) == 0 {
		d.RuntimeSecret = []byte(RuntimeSecret)
	}
	srv := server.New(d)
	hs := httptest.NewServer(srv.Echo)
	t.Cleanup(func() {
		hs.Close()
		_ = srv.Close(context.Background())
	})
	return &Server{Server: srv, URL: hs.URL, Deps: d}
}
