package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/admin"
	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/objstore/fs"
)

// fixture is a database with one workspace, one member and one project,
// and the environment the commands run in.
type fixture struct {
	env            *admin.Env
	out            *bytes.Buffer
	ws, user, proj string
	key, pairing   string
	newWS, newUser string
	stdin          *strings.Reader
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	st := storetest.SQLite(t)
	cat, err := catalog.Load(catalog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := st.CreateWorkspace(ctx, "ws", "free")
	if err != nil {
		t.Fatal(err)
	}
	u, _ := st.CreateUser(ctx, "owner@example.test")
	if _, err := st.AddMember(ctx, ws.ID, u.ID); err != nil {
		t.Fatal(err)
	}
	p, err := st.CreateProject(ctx, ws.ID, "site")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := fs.New(filepath.Join(t.TempDir(), "objects"), fs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{out: &bytes.Buffer{}, ws: ws.ID, user: u.ID, proj: p.ID, stdin: strings.NewReader("a long enough password\n")}
	f.env = &admin.Env{Store: st, Catalog: cat, RuntimeSecret: []byte("secret"), Out: f.out, In: f.stdin,
		PublicURL: "https://console.example.test",
		Publish: func(_ context.Context, podURL, token, sub string, _ time.Time) (string, string, error) {
			if podURL != "http://pod.test" || !strings.Contains(token, p.ID) || sub != "site" {
				return "", "", errors.New("publish got the wrong pod, token or subdomain")
			}
			return strings.Repeat("a", 40), "publish/site/1", nil
		},
		Objects: func(context.Context) (objstore.Store, error) { return objs, nil }}
	return f
}

// Every command runs with the flags docs/design.md §5 names and prints one
// JSON object with the fields its row checks; bad invocations are usage
// errors (exit 2) that print nothing. The rows run in order on one
// database (a row may use what an earlier one created).
func TestCommands(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, tc := range []struct {
		name string
		args func() []string
		// check the decoded answer; nil when wantErr is set.
		check   func(t *testing.T, m map[string]any)
		wantErr error
		errText string
	}{
		{name: "workspace create", args: func() []string { return []string{"workspace", "create", "--name", "beta"} },
			check: func(t *testing.T, m map[string]any) {
				f.newWS = str(t, m, "id")
				want(t, m, "name", "beta")
				want(t, m, "plan", "free")
			}},
		{name: "workspace create, unknown plan", args: func() []string { return []string{"workspace", "create", "--name", "x", "--plan", "gold"} },
			errText: `unknown plan "gold"`},
		{name: "workspace set", args: func() []string { return []string{"workspace", "set", "--id", f.newWS, "--usage-based-pricing=true"} },
			check: func(t *testing.T, m map[string]any) { want(t, m, "id", f.newWS); want(t, m, "usageBasedPricing", true) }},
		{name: "workspace set, bad bool", args: func() []string { return []string{"workspace", "set", "--id", f.newWS, "--usage-based-pricing=maybe"} },
			wantErr: admin.ErrUsage},
		{name: "user create", args: func() []string { return []string{"user", "create", "--email", "new@example.test"} },
			check: func(t *testing.T, m map[string]any) {
				f.newUser = str(t, m, "id")
				want(t, m, "email", "new@example.test")
			}},
		{name: "member add", args: func() []string {
			return []string{"member", "add", "--workspace", f.newWS, "--user", f.newUser, "--role", "owner"}
		},
			check: func(t *testing.T, m map[string]any) { want(t, m, "role", "owner"); want(t, m, "userId", f.newUser) }},
		{name: "member add, bad role", args: func() []string {
			return []string{"member", "add", "--workspace", f.newWS, "--user", f.newUser, "--role", "king"}
		},
			wantErr: admin.ErrUsage},
		{name: "user set-password", args: func() []string { return []string{"user", "set-password", "--email", "new@example.test"} },
			check: func(t *testing.T, m map[string]any) { want(t, m, "passwordSet", true); want(t, m, "id", f.newUser) }},
		{name: "user login-link", args: func() []string { return []string{"user", "login-link", "--user", f.newUser} },
			check: func(t *testing.T, m map[string]any) {
				if !strings.HasPrefix(str(t, m, "url"), "https://console.example.test/") {
					t.Errorf("url %v", m["url"])
				}
			}},
		{name: "user login-link, both ids", args: func() []string { return []string{"user", "login-link", "--user", f.newUser, "--email", "x@y"} },
			wantErr: admin.ErrUsage},
		{name: "key create", args: func() []string {
			return []string{"key", "create", "--workspace", f.ws, "--user", f.user, "--name", "ci"}
		},
			check: func(t *testing.T, m map[string]any) {
				f.key = str(t, m, "id")
				if !strings.HasPrefix(str(t, m, "key"), "svc_sk_") {
					t.Errorf("key %v", m["key"])
				}
			}},
		{name: "key create, not a member", args: func() []string { return []string{"key", "create", "--workspace", f.newWS, "--user", f.user} },
			errText: "not a member"},
		{name: "key set-budget", args: func() []string {
			return []string{"key", "set-budget", "--id", f.key, "--credits", "2.5", "--window", "monthly"}
		}, check: func(t *testing.T, m map[string]any) {
			want(t, m, "keyId", f.key)
			want(t, m, "limitMicro", 2_500_000.0)
		}},
		{name: "key set-budget, bad window", args: func() []string {
			return []string{"key", "set-budget", "--id", f.key, "--credits", "1", "--window", "hourly"}
		}, wantErr: admin.ErrUsage},
		{name: "key set-budget, clear with credits", args: func() []string {
			return []string{"key", "set-budget", "--id", f.key, "--clear", "--credits", "1"}
		}, wantErr: admin.ErrUsage},
		{name: "key set-budget, clear", args: func() []string { return []string{"key", "set-budget", "--id", f.key, "--clear"} },
			check: func(t *testing.T, m map[string]any) { want(t, m, "cleared", true) }},
		{name: "key set-budget, unknown key", args: func() []string {
			return []string{"key", "set-budget", "--id", "key_nope", "--credits", "1", "--window", "daily"}
		}, errText: "key_nope"},
		{name: "key revoke", args: func() []string { return []string{"key", "revoke", "--id", f.key} },
			check: func(t *testing.T, m map[string]any) { want(t, m, "id", f.key); str(t, m, "revokedAt") }},
		{name: "project create", args: func() []string { return []string{"project", "create", "--workspace", f.ws, "--name", "two"} },
			check: func(t *testing.T, m map[string]any) { want(t, m, "name", "two"); want(t, m, "workspaceId", f.ws) }},
		{name: "channel set", args: func() []string {
			return []string{"channel", "set", "--project", f.proj, "--callback-headers", `{"X-A":"b"}`}
		},
			check: func(t *testing.T, m map[string]any) {
				want(t, m, "hasSecret", true)
				if !strings.HasPrefix(str(t, m, "secret"), "whsec_") {
					t.Errorf("a new channel's secret %v", m["secret"])
				}
			}},
		{name: "channel set, explicit empty secret", args: func() []string { return []string{"channel", "set", "--project", f.proj, "--secret", ""} },
			check: func(t *testing.T, m map[string]any) { want(t, m, "hasSecret", false) }},
		{name: "channel set, both secrets", args: func() []string {
			return []string{"channel", "set", "--project", f.proj, "--secret", "s", "--generate-secret"}
		},
			wantErr: admin.ErrUsage},
		{name: "channel rotate-secret", args: func() []string { return []string{"channel", "rotate-secret", "--project", f.proj, "--overlap", "1h"} },
			check: func(t *testing.T, m map[string]any) {
				if !strings.HasPrefix(str(t, m, "secret"), "whsec_") {
					t.Errorf("secret %v", m["secret"])
				}
				want(t, m, "projectId", f.proj) // the channel had no secret (row above): nothing to overlap
				if _, ok := m["previousSecretExpiresAt"]; ok {
					t.Errorf("an empty old secret got an overlap: %v", m)
				}
			}},
		{name: "channel rotate-secret, overlap too long", args: func() []string {
			return []string{"channel", "rotate-secret", "--project", f.proj, "--overlap", "721h"}
		}, wantErr: admin.ErrUsage},
		{name: "channel drop-old-secret", args: func() []string { return []string{"channel", "drop-old-secret", "--project", f.proj} },
			check: func(t *testing.T, m map[string]any) {
				want(t, m, "previousSecret", false)
				want(t, m, "projectId", f.proj)
			}},
		{name: "channel signing-key", args: func() []string { return []string{"channel", "signing-key", "--project", f.proj} },
			check: func(t *testing.T, m map[string]any) {
				if pk := str(t, m, "publicKey"); !strings.HasPrefix(pk, "whpk_") || len(pk) != len("whpk_")+44 {
					t.Errorf("publicKey %v", m["publicKey"])
				}
				if _, ok := m["signingKey"]; ok {
					t.Errorf("the private key was printed: %v", m)
				}
			}},
		{name: "channel signing-key --remove", args: func() []string { return []string{"channel", "signing-key", "--project", f.proj, "--remove"} },
			check: func(t *testing.T, m map[string]any) { want(t, m, "publicKey", "") }},
		{name: "project show", args: func() []string { return []string{"project", "show", "--id", f.proj} },
			check: func(t *testing.T, m map[string]any) { want(t, m, "id", f.proj); str(t, m, "channelId") }},
		{name: "project set-sync-mode", args: func() []string { return []string{"project", "set-sync-mode", "--id", f.proj, "--mode", "s3"} },
			check: func(t *testing.T, m map[string]any) {
				want(t, m, "cloudSyncMode", "s3")
				want(t, m, "changed", true)
			}},
		{name: "project set-sync-mode, bad mode", args: func() []string { return []string{"project", "set-sync-mode", "--id", f.proj, "--mode", "ftp"} },
			wantErr: admin.ErrUsage},
		{name: "project restart", args: func() []string { return []string{"project", "restart", "--id", f.proj} },
			check: func(t *testing.T, m map[string]any) { want(t, m, "restarted", false) }},
		{name: "project runtime-token", args: func() []string { return []string{"project", "runtime-token", "--id", f.proj} },
			check: func(t *testing.T, m map[string]any) {
				if !strings.Contains(str(t, m, "token"), f.proj) {
					t.Errorf("token %v", m["token"])
				}
			}},
		{name: "project publish", args: func() []string {
			return []string{"project", "publish", "--id", f.proj, "--subdomain", "site", "--pod-url", "http://pod.test"}
		}, check: func(t *testing.T, m map[string]any) { want(t, m, "tag", "publish/site/1") }},
		{name: "project publish, no agent", args: func() []string { return []string{"project", "publish", "--id", f.proj, "--subdomain", "site"} },
			wantErr: admin.ErrUsage},
		{name: "usage show", args: func() []string { return []string{"usage", "show", "--workspace", f.ws} },
			check: func(t *testing.T, m map[string]any) {
				if w, _ := m["windows"].([]any); len(w) == 0 {
					t.Errorf("windows %v", m["windows"])
				}
			}},
		{name: "lfs gc, nothing persisted yet", args: func() []string { return []string{"lfs", "gc", "--project", f.proj, "--dry-run", "--grace", "2h"} },
			errText: "no durable repository"},
		{name: "lfs gc, short grace", args: func() []string { return []string{"lfs", "gc", "--project", f.proj, "--grace", "1m"} },
			wantErr: admin.ErrUsage},
		{name: "parity-check", args: func() []string { return []string{"parity-check", "--project", f.proj, "--since", "1h"} },
			check: func(t *testing.T, m map[string]any) {}},
		{name: "pairing create", args: func() []string { return []string{"pairing", "create", "--project", f.proj, "--name", "laptop"} },
			check: func(t *testing.T, m map[string]any) {
				f.pairing = str(t, m, "id")
				str(t, m, "token")
				want(t, m, "name", "laptop")
			}},
		{name: "pairing list", args: func() []string { return []string{"pairing", "list", "--project", f.proj} },
			check: func(t *testing.T, m map[string]any) {
				if ts, _ := m["pairingTokens"].([]any); len(ts) != 1 {
					t.Errorf("pairing tokens %v", m["pairingTokens"])
				}
			}},
		{name: "runtime show", args: func() []string { return []string{"runtime", "show", "--project", f.proj} },
			check: func(t *testing.T, m map[string]any) { want(t, m, "projectId", f.proj) }},
		{name: "pairing revoke", args: func() []string { return []string{"pairing", "revoke", "--id", f.pairing} },
			check: func(t *testing.T, m map[string]any) { want(t, m, "id", f.pairing) }},
		// Usage errors.
		{name: "unknown noun", args: func() []string { return []string{"nope"} }, wantErr: admin.ErrUsage},
		{name: "unknown verb", args: func() []string { return []string{"key", "nope"} }, wantErr: admin.ErrUsage},
		{name: "noun alone", args: func() []string { return []string{"key"} }, wantErr: admin.ErrUsage},
		{name: "missing required flag", args: func() []string { return []string{"key", "create", "--workspace", f.ws} }, errText: "--user is required"},
		{name: "unknown flag", args: func() []string { return []string{"key", "revoke", "--id", "k", "--nope"} }, wantErr: admin.ErrUsage},
		{name: "stray argument", args: func() []string { return []string{"key", "revoke", "--id", "k", "extra"} }, wantErr: admin.ErrUsage},
		{name: "help", args: func() []string { return []string{"key", "create", "--help"} }, wantErr: admin.ErrUsage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.out.Reset()
			err := admin.Run(context.Background(), f.env, tc.args())
			if tc.check == nil {
				if err == nil || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) || !strings.Contains(err.Error(), tc.errText) {
					t.Fatalf("err = %v, want %v %q", err, tc.wantErr, tc.errText)
				}
				if f.out.Len() != 0 {
					t.Fatalf("a failed command printed %s", f.out)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v: %v", tc.args(), err)
			}
			var m map[string]any
			if err := json.Unmarshal(f.out.Bytes(), &m); err != nil {
				t.Fatalf("output is not one JSON object: %v\n%s", err, f.out)
			}
			tc.check(t, m)
		})
	}
}

// Usage lists every command with its flags.
func TestUsage(t *testing.T) {
	t.Parallel()
	u := admin.Usage()
	for _, c := range []string{"workspace create", "workspace set", "user create", "user set-password", "user login-link",
		"member add", "key create", "key revoke", "project create", "project show", "project set-sync-mode",
		"project restart", "project runtime-token", "project publish", "channel set", "channel rotate-secret",
		"channel drop-old-secret", "key set-budget", "usage show", "lfs gc",
		"parity-check", "pairing create", "pairing revoke", "pairing list", "runtime show"} {
		if !strings.Contains(u, "\n  "+c+" ") {
			t.Errorf("usage lacks %q:\n%s", c, u)
		}
	}
}

func str(t *testing.T, m map[string]any, k string) string {
	t.Helper()
	s, ok := m[k].(string)
	if !ok || s == "" {
		t.Fatalf("%s = %v in %v", k, m[k], m)
	}
	return s
}

func want(t *testing.T, m map[string]any, k string, v any) {
	t.Helper()
	if m[k] != v {
		t.Errorf("%s = %v, want %v (in %v)", k, m[k], v, m)
	}
}
