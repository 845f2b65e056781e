package httpmw_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/apikey"
	"github.com/svc-dev/svc/apiserver/internal/auth"
	"github.com/svc-dev/svc/apiserver/internal/httpmw"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/shared/runtimetoken"
	"github.com/svc-dev/svc/shared/wire"
)

var secret = []byte("runtime-secret")

type fixture struct {
	st               *store.Store
	a                *auth.Authenticator
	proj, otherProj  string
	key, strangerKey string
	ws               string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	st := storetest.SQLite(t)
	f := &fixture{st: st, a: auth.New(st, secret, zap.NewNop())}
	t.Cleanup(func() { _ = f.a.Close(context.Background()) })
	member := func(name string) (wsID, key string) {
		ws, err := st.CreateWorkspace(ctx, name, "free")
		if err != nil {
			t.Fatal(err)
		}
		u, err := st.CreateUser(ctx, name+"@example.test")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.AddMember(ctx, ws.ID, u.ID); err != nil {
			t.Fatal(err)
		}
		k, err := apikey.Issue(ctx, st, ws.ID, u.ID, "k")
		if err != nil {
			t.Fatal(err)
		}
		return ws.ID, k.Key
	}
	var otherWS string
	f.ws, f.key = member("owner")
	otherWS, f.strangerKey = member("stranger")
	p, err := st.CreateProject(ctx, f.ws, "site")
	if err != nil {
		t.Fatal(err)
	}
	o, err := st.CreateProject(ctx, otherWS, "theirs")
	if err != nil {
		t.Fatal(err)
	}
	f.proj, f.otherProj = p.ID, o.ID
	return f
}

// serve runs mws then a handler that reports the principal and project the
// middleware left; it returns the handler's view or the middleware's error.
func serve(h http.Header, projectID string, withProject bool, mws ...echo.MiddlewareFunc) (auth.Principal, *store.Project, error) {
	e := echo.New()
	req := httptest.NewRequest(http.MethodPost, "/", nil)
	req.Header = h
	c := e.NewContext(req, httptest.NewRecorder())
	c.SetParamNames("projectId")
	c.SetParamValues(projectID)
	var got auth.Principal
	var proj *store.Project
	next := echo.HandlerFunc(func(c echo.Context) error {
		got = httpmw.PrincipalFrom(c)
		if withProject {
			p := httpmw.ProjectFrom(c)
			proj = &p
		}
		return nil
	})
	for i := len(mws) - 1; i >= 0; i-- {
		next = mws[i](next)
	}
	return got, proj, next(c)
}

func code(err error) string {
	var e *wire.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// Each middleware admits exactly its credential, in the header its clients
// use, and leaves a typed principal (and project) for the handler; every
// refusal carries the code of spec 7.1.
func TestMiddleware(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	rt := runtimetoken.Mint(secret, f.proj)
	for _, tc := range []struct {
		name     string
		h        http.Header
		project  string
		mws      []echo.MiddlewareFunc
		wantCode string
		wantProj string
	}{
		{name: "api key, bearer", h: hdr("Authorization", "Bearer "+f.key), mws: []echo.MiddlewareFunc{httpmw.APIKey(f.a)}},
		{name: "api key, none", h: hdr(), mws: []echo.MiddlewareFunc{httpmw.APIKey(f.a)}, wantCode: "invalid_api_key"},
		{name: "api key, in x-api-key is not read", h: hdr("X-Api-Key", f.key), mws: []echo.MiddlewareFunc{httpmw.APIKey(f.a)},
			wantCode: "invalid_api_key"},
		{name: "anthropic, x-api-key", h: hdr("X-Api-Key", f.key), mws: []echo.MiddlewareFunc{httpmw.AnthropicKey(f.a)}},
		{name: "anthropic, bearer", h: hdr("Authorization", "Bearer "+f.key), mws: []echo.MiddlewareFunc{httpmw.AnthropicKey(f.a)}},
		{name: "anthropic, wrong key", h: hdr("X-Api-Key", "svc_sk_nope"), mws: []echo.MiddlewareFunc{httpmw.AnthropicKey(f.a)},
			wantCode: "invalid_api_key"},
		{name: "runtime token", h: hdr("Authorization", "Bearer "+rt), project: f.proj,
			mws: []echo.MiddlewareFunc{httpmw.Runtime(f.a, "projectId")}},
		{name: "runtime token, missing", h: hdr(), project: f.proj,
			mws: []echo.MiddlewareFunc{httpmw.Runtime(f.a, "projectId")}, wantCode: "invalid_runtime_token"},
		{name: "runtime token, other project", h: hdr("Authorization", "Bearer "+rt), project: f.otherProj,
			mws: []echo.MiddlewareFunc{httpmw.Runtime(f.a, "projectId")}, wantCode: "invalid_runtime_token"},
		{name: "project member", h: hdr("Authorization", "Bearer "+f.key), project: f.proj,
			mws: []echo.MiddlewareFunc{httpmw.APIKey(f.a), httpmw.ProjectMember(f.st, "projectId")}, wantProj: f.proj},
		{name: "not a member", h: hdr("Authorization", "Bearer "+f.strangerKey), project: f.proj,
			mws:      []echo.MiddlewareFunc{httpmw.APIKey(f.a), httpmw.ProjectMember(f.st, "projectId")},
			wantCode: "project_access_denied"},
		{name: "no such project looks like no access", h: hdr("Authorization", "Bearer "+f.key), project: "prj_missing",
			mws:      []echo.MiddlewareFunc{httpmw.APIKey(f.a), httpmw.ProjectMember(f.st, "projectId")},
			wantCode: "project_access_denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, proj, err := serve(tc.h, tc.project, tc.wantProj != "", tc.mws...)
			if tc.wantCode != "" {
				if code(err) != tc.wantCode {
					t.Fatalf("err = %v, want code %s", err, tc.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.WorkspaceID != f.ws {
				t.Fatalf("principal %+v, want workspace %s", p, f.ws)
			}
			if tc.wantProj != "" && (proj == nil || proj.ID != tc.wantProj) {
				t.Fatalf("project %v, want %s", proj, tc.wantProj)
			}
		})
	}
}
