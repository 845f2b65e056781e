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

	"github.com/svc-dev/svc/apiserver/internal/apikey"
	"github.com/svc-dev/svc/apiserver/internal/server"
	"github.com/svc-dev/svc/apiserver/internal/store"
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
	hs := httptest.NewUnstartedServer(srv.Echo)
	hs.Config = srv.HTTPServer()                  // the timeouts cmd/apiserver serves with
	hs.Listener = srv.Streams.Listen(hs.Listener) // as cmd/apiserver serves
	hs.Start()
	t.Cleanup(func() {
		hs.Close()
		_ = srv.Streams.Shutdown(context.Background())
		_ = srv.Close(context.Background())
	})
	return &Server{Server: srv, URL: hs.URL, Deps: d}
}

// Account is a workspace with one member and that member's API key.
type Account struct {
	WorkspaceID, UserID string
	// Key is the plain API key (Bearer).
	Key string
}

// NewAccount creates an Account on the free plan in db.
func NewAccount(t testing.TB, db *store.Store) Account {
	t.Helper()
	ctx := context.Background()
	ws, err := db.CreateWorkspace(ctx, "ws", "free")
	if err != nil {
		t.Fatal(err)
	}
	u, err := db.CreateUser(ctx, store.NewID("u")+"@test.invalid")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.AddMember(ctx, ws.ID, u.ID); err != nil {
		t.Fatal(err)
	}
	k, err := apikey.Issue(ctx, db, ws.ID, u.ID, "test")
	if err != nil {
		t.Fatal(err)
	}
	return Account{WorkspaceID: ws.ID, UserID: u.ID, Key: k.Key}
}
