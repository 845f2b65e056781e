package store_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
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

// benchPassword signs the benchmark's console user in.
const benchPassword = "usage at scale bench"

var benchCSRF = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

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
	if err := login.SetPassword(ctx, s, u.ID, benchPassword); err != nil {
		b.Fatal(err)
	}
	if _, err := s.SetMember(ctx, ws, u.ID, store.RoleOwner); err != nil {
		b.Fatal(err)
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(ctx context.Context, path string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+path, nil)
		if err != nil {
			return 0, "", err
		}
		res, err := c.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		return res.StatusCode, string(body), err
	}
	_, page, err := get(ctx, "/console/sign-in")
	if err != nil {
		b.Fatal(err)
	}
	m := benchCSRF.FindStringSubmatch(page)
	if m == nil {
		b.Fatalf("no CSRF field on the sign-in page: %.300s", page)
	}
	res, err := c.PostForm(hs.URL+"/console/sign-in", url.Values{"csrf": {m[1]}, "email": {email},
		"password": {benchPassword}, "next": {"/console"}})
	if err != nil {
		b.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther {
		b.Fatalf("sign in: %d", res.StatusCode)
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
