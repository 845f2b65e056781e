package auth

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/apikey"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/shared/runtimetoken"
	"github.com/svc-dev/svc/shared/wire"
)

type fixture struct {
	st         *store.Store
	a          *Authenticator
	now        time.Time
	ws, user   string
	proj       string
	key, keyID string
}

var secret = []byte("runtime-secret")

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	st := storetest.SQLite(t)
	ws, err := st.CreateWorkspace(ctx, "ws", "free")
	if err != nil {
		t.Fatal(err)
	}
	u, err := st.CreateUser(ctx, "owner@example.test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AddMember(ctx, ws.ID, u.ID); err != nil {
		t.Fatal(err)
	}
	p, err := st.CreateProject(ctx, ws.ID, "site")
	if err != nil {
		t.Fatal(err)
	}
	k, err := apikey.Issue(ctx, st, ws.ID, u.ID, "ci")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{st: st, ws: ws.ID, user: u.ID, proj: p.ID, key: k.Key, keyID: k.ID,
		now: time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)}
	f.a = New(st, secret, zap.NewNop())
	f.a.now = func() time.Time { return f.now }
	t.Cleanup(func() { _ = f.a.Close(context.Background()) })
	return f
}

// codeOf is the error code of an error that reached the wire envelope.
func codeOf(err error) string {
	var e *wire.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// An API key authenticates only as the exact svc_sk_ key it was issued as:
// any other shape, a wrong secret, an unknown id or a runtime token is
// invalid_api_key (spec 5.1.2, 5.1.4), and the principal names the key's
// workspace and user.
func TestAPIKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	tampered := f.key[:len(f.key)-1] + map[bool]string{true: "A", false: "B"}[f.key[len(f.key)-1] != 'A']
	unknownID := apikey.New()
	for _, tc := range []struct {
		name, token string
		ok          bool
	}{
		{"issued key", f.key, true},
		{"wrong secret", tampered, false},
		{"unknown id", unknownID.Plain, false},
		{"not our shape", "sk-abc123", false},
		{"empty", "", false},
		{"runtime token", runtimetoken.Mint(secret, f.proj), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := f.a.APIKey(ctx, tc.token)
			if !tc.ok {
				if code := codeOf(err); code != "invalid_api_key" {
					t.Fatalf("err = %v (code %q), want invalid_api_key", err, code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.KeyID != f.keyID || p.UserID != f.user || p.WorkspaceID != f.ws || p.Runtime() {
				t.Fatalf("principal %+v, want key %s user %s workspace %s", p, f.keyID, f.user, f.ws)
			}
		})
	}
}

// A revoked key is refused once the cached row is older than CacheTTL: the
// bound every replica keeps (docs/design.md), and never later.
func TestRevocationSeenWithinCacheTTL(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.a.APIKey(ctx, f.key); err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.RevokeAPIKey(ctx, f.keyID); err != nil {
		t.Fatal(err)
	}
	f.now = f.now.Add(CacheTTL)
	if _, err := f.a.APIKey(ctx, f.key); codeOf(err) != "invalid_api_key" {
		t.Fatalf("revoked key after CacheTTL: %v, want invalid_api_key", err)
	}
}

// A key used again once its cached row is refreshAhead old is still served
// from the cache, and its row is read again in the background: a
// revocation made before that read is seen by the next use, still within
// CacheTTL of the first read, without a read on the request path. A row
// served is never older than CacheTTL.
func TestKeyRefreshedAhead(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.a.APIKey(ctx, f.key); err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.RevokeAPIKey(ctx, f.keyID); err != nil {
		t.Fatal(err)
	}
	f.now = f.now.Add(refreshAhead / 2)
	if _, err := f.a.APIKey(ctx, f.key); err != nil {
		t.Fatalf("before refreshAhead the cached row is served: %v", err)
	}
	if err := f.a.Close(ctx); err != nil { // nothing was read in the background
		t.Fatal(err)
	}
	if _, err := f.a.APIKey(ctx, f.key); err != nil {
		t.Fatalf("before refreshAhead the cached row is still served: %v", err)
	}
	f.now = f.now.Add(refreshAhead / 2)
	if _, err := f.a.APIKey(ctx, f.key); err != nil {
		t.Fatalf("at refreshAhead the cached row is served: %v", err)
	}
	if err := f.a.Close(ctx); err != nil { // the background read
		t.Fatal(err)
	}
	f.now = f.now.Add((CacheTTL - refreshAhead) / 2)
	if _, err := f.a.APIKey(ctx, f.key); codeOf(err) != "invalid_api_key" {
		t.Fatalf("after the background read: %v, want invalid_api_key", err)
	}
}

// The first use of a key records its last use (off the request path); Close
// waits for that write.
func TestLastUseRecorded(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.a.APIKey(ctx, f.key); err != nil {
		t.Fatal(err)
	}
	if err := f.a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	k, err := f.st.GetAPIKey(ctx, f.keyID)
	if err != nil {
		t.Fatal(err)
	}
	if k.LastUsedAt == nil || !k.LastUsedAt.Equal(f.now) {
		t.Fatalf("last used %v, want %v", k.LastUsedAt, f.now)
	}
}

// A runtime token authenticates only for its own project (spec 5.3).
func TestRuntime(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	other, err := f.st.CreateProject(ctx, f.ws, "other")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, token, project, code string
	}{
		{"own project", runtimetoken.Mint(secret, f.proj), f.proj, ""},
		{"another project's token", runtimetoken.Mint(secret, other.ID), f.proj, "invalid_runtime_token"},
		{"other secret", runtimetoken.Mint([]byte("not-ours"), f.proj), f.proj, "invalid_runtime_token"},
		{"api key", f.key, f.proj, "invalid_runtime_token"},
		{"project gone", runtimetoken.Mint(secret, "prj_missing"), "prj_missing", "project_not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := f.a.Runtime(ctx, tc.token, tc.project)
			if tc.code != "" {
				if codeOf(err) != tc.code {
					t.Fatalf("err = %v, want code %s", err, tc.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !p.Runtime() || p.ProjectID != f.proj || p.WorkspaceID != f.ws {
				t.Fatalf("principal %+v", p)
			}
		})
	}
	// Without a runtime secret no token is valid.
	noSecret := New(f.st, nil, zap.NewNop())
	if _, err := noSecret.Runtime(ctx, runtimetoken.Mint(nil, f.proj), f.proj); codeOf(err) != "invalid_runtime_token" {
		t.Fatalf("runtime auth without a secret: %v", err)
	}
}

func TestBearer(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"Bearer abc":    "abc",
		"bearer  abc ":  "abc",
		"Bearer ":       "",
		"Basic abc":     "",
		"":              "",
		"Bearerabc":     "",
		"BEARER svc_sk": "svc_sk",
	} {
		if got := Bearer(in); got != want {
			t.Errorf("Bearer(%q) = %q, want %q", in, got, want)
		}
	}
}

// While the database does not answer, a key this replica read within
// StaleFor is still served; past it, or for a key it never read, or with
// StaleFor 0, the answer is 503 service_unavailable, never 401.
func TestKnownKeysServedWhileDatabaseIsDown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		staleFor time.Duration
		after    time.Duration // since the key was last read
		want     string        // "" admitted, else the error code
	}{
		{"known key", 10 * time.Minute, time.Minute, ""},
		{"known too long", 10 * time.Minute, 11 * time.Minute, "service_unavailable"},
		{"fail closed", 0, time.Second, "service_unavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.a.StaleFor = tc.staleFor
			ctx := context.Background()
			if _, err := f.a.APIKey(ctx, f.key); err != nil {
				t.Fatal(err)
			}
			if err := f.st.Close(); err != nil { // the database goes away
				t.Fatal(err)
			}
			f.now = f.now.Add(tc.after)
			p, err := f.a.APIKey(ctx, f.key)
			if got := codeOf(err); got != tc.want || (err == nil && p.WorkspaceID != f.ws) {
				t.Fatalf("known key: %v (%+v), want %q", err, p, tc.want)
			}
			// A key this replica never read: 503, not 401.
			other := "svc_sk_aaaaaaaaaaaa_" + strings.Repeat("b", 40)
			if _, err := f.a.APIKey(ctx, other); codeOf(err) != "service_unavailable" {
				t.Fatalf("unknown key: %v, want service_unavailable", err)
			}
		})
	}
}
