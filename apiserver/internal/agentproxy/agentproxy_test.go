package agentproxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/apiserver/internal/apierr"
	"github.com/svc-dev/svc/apiserver/internal/auth"
	"github.com/svc-dev/svc/apiserver/internal/httpmw"
	"github.com/svc-dev/svc/apiserver/internal/runtimes"
	"github.com/svc-dev/svc/apiserver/internal/store"
)

func TestAgentPath(t *testing.T) {
	t.Parallel()
	p := &Proxy{}
	for _, c := range []struct {
		path string
		ok   bool
		rest string
	}{
		{"/api/projects/prj_1/agent-proxy/agent/channels/webhook/incoming", true, "/agent/channels/webhook/incoming"},
		{"/api/projects/prj_1/agent-proxy/agent/channels/webhook/outbox/ch_9", true, "/agent/channels/webhook/outbox/ch_9"},
		{"/api/projects/prj_1/agent-proxy/agent/channels/webhook/outbox/ch%209", true, "/agent/channels/webhook/outbox/ch 9"},
		{"/api/projects/prj_1/agent-proxy/healthz", true, "/healthz"},
		{"/api/projects/prj_1/agent-proxy/readyz", true, "/readyz"},
		{"/api/projects/prj_1/agent-proxy/agent/channels/", false, ""},
		{"/api/projects/prj_1/agent-proxy/agent/git-flush", false, ""},
		{"/api/projects/prj_1/agent-proxy/agent/channels/../git-flush", false, ""},
		{"/api/projects/prj_1/agent-proxy/agent/channels/%2e%2e/git-flush", false, ""},
		{"/api/projects/prj_1/agent-proxy/agent/channels%2F..%2Fgit-flush", false, ""},
		{"/api/projects/prj_1/agent-proxy//agent/channels/x", false, ""},
		{"/api/projects/prj_1/agent-proxy/healthzz", false, ""},
		{"/api/projects/prj_1/agent-proxy/metrics", false, ""},
		{"/api/projects/prj_1/agent-proxy", false, ""},
	} {
		u, err := url.Parse(c.path)
		if err != nil {
			t.Fatal(err)
		}
		rest, _, ok := agentPath(u, "/agent-proxy/")
		ok = ok && p.allowed(rest)
		if ok != c.ok || (ok && rest != c.rest) {
			t.Errorf("%s: %q %v, want %q %v", c.path, rest, ok, c.rest, c.ok)
		}
	}
}

// driver is a runtimes.Driver returning a fixed endpoint or error.
type driver struct {
	ep  runtimes.Endpoint
	err error
}

func (d driver) Name() string { return "test" }
func (d driver) Ensure(context.Context, store.Project) (runtimes.Endpoint, error) {
	return d.ep, d.err
}
func (d driver) Stop(context.Context, string) error { return nil }
func (d driver) Status(context.Context, string) (runtimes.Status, error) {
	return runtimes.Status{}, nil
}

func serve(t *testing.T, p *Proxy, method, path string, body io.Reader) *httptest.ResponseRecorder {
	t.Helper()
	p.Log = zaptest.NewLogger(t)
	e := echo.New()
	e.HTTPErrorHandler = apierr.Handler(p.Log)
	e.Any("/api/projects/:id/agent-proxy/*", func(c echo.Context) error {
		return p.serve(c, store.Project{ID: c.Param("id")})
	})
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(method, path, body))
	return rec
}

func TestRuntimeErrorsMapToSpecCodes(t *testing.T) {
	t.Parallel()
	start := &runtimes.StartError{ProjectID: "prj_1", RetryAfter: 2500 * time.Millisecond, Err: errors.New("boom")}
	withReason := &runtimes.StartError{ProjectID: "prj_1", RetryAfter: time.Second, Err: errors.New("boom"),
		Reason: "pod p: not Ready within 3s"}
	for _, c := range []struct {
		err    error
		status int
		code   string
		retry  string
		reason string // in the message
	}{
		{start, 503, "agent_start_failed", "3", ""},
		{withReason, 503, "agent_start_failed", "1", "(pod p: not Ready within 3s)"},
		{runtimes.ErrOffline, 503, "instance_offline", "", ""},
		{errors.New("database down"), 500, "internal_error", "", ""},
	} {
		rec := serve(t, &Proxy{Runtime: driver{err: c.err}}, http.MethodPost,
			"/api/projects/prj_1/agent-proxy/agent/channels/webhook/incoming", strings.NewReader(`{}`))
		if rec.Code != c.status || !strings.Contains(rec.Body.String(), `"code":"`+c.code+`"`) ||
			rec.Header().Get("Retry-After") != c.retry {
			t.Errorf("%v: %d %s Retry-After=%q", c.err, rec.Code, rec.Body, rec.Header().Get("Retry-After"))
		}
		if !strings.Contains(rec.Body.String(), c.reason) {
			t.Errorf("%v: the message lacks the reason %q: %s", c.err, c.reason, rec.Body)
		}
		if strings.Contains(rec.Body.String(), "boom") || strings.Contains(rec.Body.String(), "database") {
			t.Errorf("%v: cause leaked: %s", c.err, rec.Body)
		}
	}
}

func TestAgentTimeoutIs504(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer agent.Close()
	defer close(release)
	u, _ := url.Parse(agent.URL)
	rec := serve(t, &Proxy{Runtime: driver{ep: runtimes.Endpoint{URL: u, Token: "rt"}}, Timeout: 50 * time.Millisecond},
		http.MethodGet, "/api/projects/prj_1/agent-proxy/agent/channels/webhook/outbox/ch_1?wait=30", nil)
	if rec.Code != http.StatusGatewayTimeout || !strings.Contains(rec.Body.String(), "agent_timeout") {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
}

func TestEndpointPathAndTransport(t *testing.T) {
	t.Parallel()
	var got *http.Request
	rt := roundTripper(func(r *http.Request) (*http.Response, error) {
		got = r
		return &http.Response{StatusCode: 202, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(`{"status":"accepted"}`)), Request: r}, nil
	})
	u, _ := url.Parse("http://paired.invalid/base/")
	rec := serve(t, &Proxy{Runtime: driver{ep: runtimes.Endpoint{URL: u, Token: "rt", Transport: rt}}},
		http.MethodPost, "/api/projects/prj_1/agent-proxy/agent/channels/webhook/incoming?a=b", strings.NewReader(`{"message":"x"}`))
	if rec.Code != 202 || rec.Body.String() != `{"status":"accepted"}` {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if got.URL.String() != "http://paired.invalid/base/agent/channels/webhook/incoming?a=b" || got.Host != "paired.invalid" ||
		got.Header.Get("Authorization") != "Bearer rt" || got.GetBody != nil {
		t.Fatalf("outgoing %s host=%s auth=%q", got.URL, got.Host, got.Header.Get("Authorization"))
	}
}

// The relay route: the project comes from the runtime token's principal, the
// agent path follows /relay, only the proxied paths pass, the first hop's
// X-Forwarded-For is kept, and a POST is sent once.
func TestRelayMode(t *testing.T) {
	t.Parallel()
	var got []*http.Request
	rt := roundTripper(func(r *http.Request) (*http.Response, error) {
		got = append(got, r)
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(`{"reply":"ok"}`)), Request: r}, nil
	})
	var ensured []string
	u, _ := url.Parse("http://paired.invalid")
	p := &Proxy{Relay: true, Log: zaptest.NewLogger(t), Runtime: recordingDriver{driver: driver{ep: runtimes.Endpoint{URL: u, Token: "rt", Transport: rt}}, ids: &ensured}}
	e := echo.New()
	e.HTTPErrorHandler = apierr.Handler(p.Log)
	e.Any("/internal/projects/:id/relay/*", p.Handle, func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			httpmw.SetPrincipal(c, auth.Principal{ProjectID: c.Param("id"), WorkspaceID: "ws_1"})
			return next(c)
		}
	})
	do := func(method, path string, body io.Reader, h http.Header) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, body)
		for k, v := range h {
			req.Header[k] = v
		}
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		return rec
	}
	rec := do(http.MethodPost, "/internal/projects/prj_1/relay/agent/channels/webhook/incoming?x=1", strings.NewReader(`{"message":"m"}`),
		http.Header{"X-Forwarded-For": {"203.0.113.9"}, "X-Webhook-Secret": {"s"}})
	if rec.Code != 200 || rec.Body.String() != `{"reply":"ok"}` {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if len(got) != 1 || got[0].URL.String() != "http://paired.invalid/agent/channels/webhook/incoming?x=1" ||
		got[0].Header.Get("X-Forwarded-For") != "203.0.113.9" || got[0].Header.Get("X-Webhook-Secret") != "s" ||
		got[0].Header.Get("Authorization") != "Bearer rt" || got[0].GetBody != nil {
		t.Fatalf("outgoing %+v", got)
	}
	if len(ensured) != 1 || ensured[0] != "prj_1" {
		t.Fatalf("ensured %q", ensured)
	}
	for _, path := range []string{"/internal/projects/prj_1/relay/metrics",
		"/internal/projects/prj_1/relay/agent/channels/%2e%2e/metrics"} {
		if rec := do(http.MethodPost, path, strings.NewReader(`{}`), nil); rec.Code != http.StatusNotFound {
			t.Errorf("%s: %d %s", path, rec.Code, rec.Body)
		}
	}
	if len(got) != 1 {
		t.Fatalf("refused paths reached the agent: %d requests", len(got))
	}
}

type recordingDriver struct {
	driver
	ids *[]string
}

func (d recordingDriver) Ensure(ctx context.Context, p store.Project) (runtimes.Endpoint, error) {
	*d.ids = append(*d.ids, p.ID)
	return d.driver.Ensure(ctx, p)
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func FuzzAgentPath(f *testing.F) {
	f.Add("/api/projects/p/agent-proxy/agent/channels/webhook/incoming")
	f.Add("/api/projects/p/agent-proxy/agent/channels/%2e%2e/git-flush")
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := url.Parse(raw)
		if err != nil {
			return
		}
		rest, rawRest, ok := agentPath(u, "/agent-proxy/")
		if !ok || !(&Proxy{}).allowed(rest) {
			return
		}
		// What is forwarded is clean and stays under an allowed prefix.
		if strings.Contains(rest, "/../") || strings.HasSuffix(rest, "/..") || strings.Contains(rest, "//") {
			t.Fatalf("%q → %q", raw, rest)
		}
		if dec, err := url.PathUnescape(rawRest); err != nil || dec != rest {
			t.Fatalf("%q: raw %q decodes to %q, not %q", raw, rawRest, dec, rest)
		}
	})
}
