package store_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/console"
	"github.com/svc-dev/svc/apiserver/internal/console/login"
	"github.com/svc-dev/svc/apiserver/internal/server"
	"github.com/svc-dev/svc/apiserver/internal/store"
)

// consoleUsagePage serves the console on s (the API server's handler, as in
// production) with a user owning ws signed in, and returns a call that gets
// the workspace's usage page (GET /console/w/{ws}/usage): session lookup,
// membership check, the page's reads and its render.
func consoleUsagePage(b *testing.B, s *store.Store, ws string) func(ctx context.Context) error {
	b.Helper()
	ctx := context.Background()
	cat, err := catalog.Load(catalog.Options{})
	if err != nil {
		b.Fatal(err)
	}
	srv := server.New(server.Deps{Store: s, Catalog: cat, Log: zap.NewNop(),
		Console: &console.Options{Now: time.Now, IdleTimeout: 24 * time.Hour, AbsoluteTimeout: 24 * time.Hour}})
	hs := httptest.NewServer(srv.Echo)
	b.Cleanup(func() {
		hs.Close()
		_ = srv.Close(context.Background())
	})
	const email = "bench-usage@example.test"
	u, err := s.FindUserByEmail(ctx, email)
	if errors.Is(err, store.ErrNotFound) {
		u, err = s.CreateUser(ctx, email)
	}
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.SetMember(ctx, ws, u.ID, store.RoleOwner); err != nil {
		b.Fatal(err)
	}
	// Signed in as the sign-in form does it (a session row, its token in
	// the cookie), without the form, whose per-email limit a series of
	// runs on a kept database would reach.
	token, now := login.RandomToken(), time.Now().UTC()
	if err := s.CreateSession(ctx, store.Session{TokenHash: login.TokenHash(token), UserID: u.ID,
		CSRFToken: login.RandomToken(), CreatedAt: now, LastSeenAt: now, ExpiresAt: now.Add(24 * time.Hour)}); err != nil {
		b.Fatal(err)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(ctx context.Context, path string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+path, nil)
		if err != nil {
			return 0, "", err
		}
		req.AddCookie(&http.Cookie{Name: console.SessionCookie, Value: token})
		res, err := c.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		return res.StatusCode, string(body), err
	}
	path := "/console/w/" + ws + "/usage"
	return func(ctx context.Context) error {
		status, body, err := get(ctx, path)
		if err != nil {
			return err
		}
		if status != http.StatusOK || !strings.Contains(body, "Usage") {
			return fmt.Errorf("GET %s: %d %.300s", path, status, body)
		}
		return nil
	}
}
