package webhooklog_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/apiserver/internal/agentapi"
	"github.com/svc-dev/svc/apiserver/internal/apierr"
	"github.com/svc-dev/svc/apiserver/internal/auth"
	"github.com/svc-dev/svc/apiserver/internal/httpmw"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/apiserver/internal/webhookapi"
	"github.com/svc-dev/svc/apiserver/internal/webhooklog"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/wire"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// world is the log's routes over a store with a member, a project and its
// channel (secret "sec", rotated from "old" with an overlap).
type world struct {
	s       *store.Store
	log     *webhooklog.Log
	reg     *prometheus.Registry
	e       *echo.Echo
	project string
	channel string
}

func newWorld(t *testing.T, s *store.Store) *world {
	ctx := context.Background()
	ws, err := s.CreateWorkspace(ctx, "acme", "free")
	testenv.Must(t, err)
	u, err := s.CreateUser(ctx, "dev@acme.test")
	testenv.Must(t, err)
	_, err = s.AddMember(ctx, ws.ID, u.ID)
	testenv.Must(t, err)
	p, err := s.CreateProject(ctx, ws.ID, "p")
	testenv.Must(t, err)
	old := "old"
	_, err = s.SetChannel(ctx, p.ID, &old, nil)
	testenv.Must(t, err)
	ch, err := s.RotateChannelSecret(ctx, p.ID, "sec", time.Hour)
	testenv.Must(t, err)
	w := &world{s: s, reg: prometheus.NewRegistry(), project: p.ID, channel: ch.ID}
	w.log = webhooklog.New(s, zaptest.NewLogger(t), w.reg)
	w.log.FailingAfter = time.Hour
	h := &webhookapi.Handlers{Log: w.log, Channels: s}
	e := echo.New()
	e.HTTPErrorHandler = apierr.Handler(zaptest.NewLogger(t))
	runtime := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			httpmw.SetPrincipal(c, auth.Principal{ProjectID: c.Request().Header.Get("X-Test-Runtime")})
			return next(c)
		}
	}
	member := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			httpmw.SetPrincipal(c, auth.Principal{KeyID: "key_1", UserID: u.ID})
			return next(c)
		}
	}
	// The routes of server.routes, with stand-in authentication.
	e.POST(internalapi.ProjectGroup+internalapi.PathWebhookAttempts, (&agentapi.API{Attempts: w.log}).WebhookAttempts, runtime)
	proxy := e.Group("/api/projects/:id/agent-proxy", member, httpmw.ProjectMember(s, "id"))
	proxy.GET(internalapi.PodWebhook+"/attempts", h.List)
	proxy.GET(internalapi.PodWebhook+"/endpoints", h.Endpoints)
	proxy.GET(internalapi.PodWebhook+"/signing-key", h.SigningKey)
	proxy.POST(internalapi.PodWebhook+"/replay/:correlationId", h.Replay)
	w.e = e
	return w
}

func (w *world) serve(method, path, runtime, secret string, body any) *httptest.ResponseRecorder {
	var r *http.Request
	if body != nil {
		b, _ := json.Marshal(body)
		r = httptest.NewRequest(method, path, strings.NewReader(string(b)))
		r.Header.Set("Content-Type", "application/json")
	} else {
		r = httptest.NewRequest(method, path, nil)
	}
	if runtime != "" {
		r.Header.Set("X-Test-Runtime", runtime)
	}
	if secret != "" {
		r.Header.Set(wire.HeaderWebhookSecret, secret)
	}
	rec := httptest.NewRecorder()
	w.e.ServeHTTP(rec, r)
	return rec
}

func (w *world) attempt(id, corr, outcome string, status int, at time.Time) wire.WebhookAttempt {
	a := wire.WebhookAttempt{ID: id, ChannelID: w.channel, CorrelationID: corr, WebhookID: "msg_" + corr,
		Kind: wire.AttemptDelivery, Attempt: 1, URL: "https://hooks.example/cb", AttemptedAt: at, LatencyMS: 12,
		Status: status, ResponseHead: "answer", Outcome: outcome}
	if outcome == wire.AttemptRetrying {
		a.NextRetryAt = at.Add(time.Minute)
	}
	return a
}

// The pod's records are stored once, served newest first page by page
// with each message's final state, to a member with the channel secret (or
// the one a rotation replaced, during the overlap); a failure streak that
// lasts the period marks the endpoint failing (metric) and a success
// re-enables it.
func TestAttemptLogRoutes(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		w := newWorld(t, s)
		ctx := context.Background()
		t0 := time.Now().UTC().Add(-3 * time.Hour).Truncate(time.Millisecond)
		put := wire.WebhookAttemptsPut{Attempts: []wire.WebhookAttempt{
			w.attempt("att_1", "cor_a", wire.AttemptRetrying, 503, t0),
			w.attempt("att_2", "cor_a", wire.AttemptFailed, 503, t0.Add(2*time.Hour)),
			w.attempt("att_3", "cor_b", wire.AttemptFailed, 0, t0.Add(2*time.Hour+time.Second)),
		}}
		put.Attempts[2].Error = "dial tcp: connection refused"
		for _, tc := range []struct {
			name, runtime string
			body          any
			status        int
			stored        int
		}{
			{"another project's runtime", "prj_other", put, 403, 0},
			{"a record without an id", w.project, wire.WebhookAttemptsPut{Attempts: []wire.WebhookAttempt{{CorrelationID: "c"}}}, 400, 0},
			{"stored", w.project, put, 200, 3},
			{"re-sent: nothing new", w.project, put, 200, 0},
		} {
			rec := w.serve(http.MethodPost, "/internal/projects/"+w.project+"/webhook/attempts", tc.runtime, "", tc.body)
			var out wire.WebhookAttemptsPutResponse
			_ = json.Unmarshal(rec.Body.Bytes(), &out)
			if rec.Code != tc.status || out.Stored != tc.stored {
				t.Fatalf("%s: %d %s, want %d storing %d", tc.name, rec.Code, rec.Body, tc.status, tc.stored)
			}
		}
		_, _, err := s.PutOutbox(ctx, store.OutboxMessage{ProjectID: w.project, ChannelID: w.channel, CorrelationID: "cor_a", Reply: "r"})
		testenv.Must(t, err)

		list := "/api/projects/" + w.project + "/agent-proxy/agent/channels/webhook/attempts"
		for _, sec := range []string{"", "wrong"} {
			if rec := w.serve(http.MethodGet, list, "", sec, nil); rec.Code != 401 {
				t.Fatalf("list with secret %q: %d", sec, rec.Code)
			}
		}
		var page wire.WebhookAttemptList
		rec := w.serve(http.MethodGet, list+"?limit=2", "", "old", nil) // the replaced secret, during the overlap
		if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &page) != nil || len(page.Attempts) != 2 ||
			page.Attempts[0].ID != "att_3" || page.Attempts[1].ID != "att_2" || page.NextCursor == "" {
			t.Fatalf("first page: %d %s", rec.Code, rec.Body)
		}
		if a := page.Attempts[1]; a.MessageState != wire.MessageInOutbox || a.Status != 503 || a.ResponseHead != "answer" ||
			a.LatencyMS != 12 || !a.AttemptedAt.Equal(t0.Add(2*time.Hour)) {
			t.Fatalf("attempt = %+v", a)
		}
		rec = w.serve(http.MethodGet, list+"?limit=2&cursor="+page.NextCursor, "", "sec", nil)
		var rest wire.WebhookAttemptList
		if json.Unmarshal(rec.Body.Bytes(), &rest) != nil || len(rest.Attempts) != 1 || rest.Attempts[0].ID != "att_1" ||
			rest.NextCursor != "" || rest.Attempts[0].NextRetryAt.IsZero() {
			t.Fatalf("second page: %d %s", rec.Code, rec.Body)
		}
		if rec := w.serve(http.MethodGet, list+"?cursor=nonsense", "", "sec", nil); rec.Code != 400 {
			t.Fatalf("bad cursor: %d %s", rec.Code, rec.Body)
		}

		// Two hours of failures, period one hour: failing.
		var eps struct {
			Endpoints []wire.WebhookEndpointHealth `json:"endpoints"`
		}
		rec = w.serve(http.MethodGet, "/api/projects/"+w.project+"/agent-proxy/agent/channels/webhook/endpoints", "", "sec", nil)
		if json.Unmarshal(rec.Body.Bytes(), &eps) != nil || len(eps.Endpoints) != 1 || !eps.Endpoints[0].Failing ||
			eps.Endpoints[0].ConsecutiveFailures != 3 || !strings.Contains(eps.Endpoints[0].LastError, "refused") {
			t.Fatalf("endpoints: %d %s", rec.Code, rec.Body)
		}
		if n := metric(t, w.reg, "svc_webhook_endpoint_failing_total"); n != 1 {
			t.Fatalf("svc_webhook_endpoint_failing_total = %v", n)
		}
		testenv.Must(t, w.log.RefreshGauge(ctx, s))
		if n := metric(t, w.reg, "svc_webhook_endpoints_failing"); n != 1 {
			t.Fatalf("svc_webhook_endpoints_failing = %v, want 1", n)
		}
		ok := w.attempt("att_4", "cor_test_1", wire.AttemptDelivered, 200, time.Now().UTC())
		ok.Kind = wire.AttemptTest
		if rec := w.serve(http.MethodPost, "/internal/projects/"+w.project+"/webhook/attempts", w.project, "",
			wire.WebhookAttemptsPut{Attempts: []wire.WebhookAttempt{ok}}); rec.Code != 200 {
			t.Fatalf("test attempt: %d %s", rec.Code, rec.Body)
		}
		if f, _ := s.ListWebhookEndpoints(ctx, w.project, true); len(f) != 0 {
			t.Fatalf("still failing after a successful test message: %+v", f)
		}
		testenv.Must(t, w.log.RefreshGauge(ctx, s))
		if n := metric(t, w.reg, "svc_webhook_endpoints_failing"); n != 0 || metric(t, w.reg, "svc_webhook_endpoint_reenabled_total") != 1 {
			t.Fatalf("after the re-enable: failing %v", n)
		}
	})
}

func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	mfs, err := reg.Gather()
	testenv.Must(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return -1
}

// Replay refuses what it cannot re-send, with a clear code: an unknown
// message, one without a reply yet, and one whose callback URL the log
// does not know.
func TestReplayRefusals(t *testing.T) {
	t.Parallel()
	w := newWorld(t, storetest.SQLite(t)) // no runtime: a refusal must come before the pod is asked
	ctx := context.Background()
	testenv.Must(t, w.s.AcceptOutbox(ctx, w.project, w.channel, "cor_pending", time.Now().Add(time.Hour)))
	_, _, err := w.s.PutOutbox(ctx, store.OutboxMessage{ProjectID: w.project, ChannelID: w.channel, CorrelationID: "cor_sync", Reply: "r"})
	testenv.Must(t, err)
	for _, tc := range []struct{ corr, code string }{
		{"cor_nope", "message_not_found"}, {"cor_pending", "message_not_replayable"}, {"cor_sync", "no_callback_url"},
	} {
		rec := w.serve(http.MethodPost, "/api/projects/"+w.project+"/agent-proxy/agent/channels/webhook/replay/"+tc.corr, "", "sec", nil)
		var eb wire.ErrorBody
		_ = json.Unmarshal(rec.Body.Bytes(), &eb)
		if eb.Error.Code != tc.code {
			t.Errorf("%s: %d %s, want %s", tc.corr, rec.Code, rec.Body, tc.code)
		}
	}
}

// One 410 Gone answer marks the endpoint failing at once (metric, gauge,
// listed as failing) although the failing period has not passed; a
// successful test message re-enables it. The signing-key route shows the
// public half of the channel's ed25519 key, or none.
func TestGoneAndSigningKeyRoutes(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		w := newWorld(t, s)
		ctx := context.Background()
		put := func(a wire.WebhookAttempt) {
			t.Helper()
			if rec := w.serve(http.MethodPost, "/internal/projects/"+w.project+"/webhook/attempts", w.project, "",
				wire.WebhookAttemptsPut{Attempts: []wire.WebhookAttempt{a}}); rec.Code != 200 {
				t.Fatalf("attempt %s: %d %s", a.ID, rec.Code, rec.Body)
			}
		}
		put(w.attempt("att_gone", "cor_gone", wire.AttemptFailed, 410, time.Now().UTC()))
		if f, _ := s.ListWebhookEndpoints(ctx, w.project, true); len(f) != 1 || f[0].Endpoint != "https://hooks.example/cb" {
			t.Fatalf("after a 410: failing %+v, want the endpoint", f)
		}
		if n := metric(t, w.reg, "svc_webhook_endpoint_failing_total"); n != 1 {
			t.Fatalf("svc_webhook_endpoint_failing_total = %v", n)
		}
		testenv.Must(t, w.log.RefreshGauge(ctx, s))
		if n := metric(t, w.reg, "svc_webhook_endpoints_failing"); n != 1 {
			t.Fatalf("svc_webhook_endpoints_failing = %v, want 1", n)
		}
		ok := w.attempt("att_ok", "cor_test_1", wire.AttemptDelivered, 200, time.Now().UTC())
		ok.Kind = wire.AttemptTest
		put(ok)
		if f, _ := s.ListWebhookEndpoints(ctx, w.project, true); len(f) != 0 {
			t.Fatalf("still failing after a successful test message: %+v", f)
		}

		key := func() wire.WebhookSigningPublicKey {
			t.Helper()
			rec := w.serve(http.MethodGet, "/api/projects/"+w.project+"/agent-proxy/agent/channels/webhook/signing-key", "", "", nil)
			var out wire.WebhookSigningPublicKey
			if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &out) != nil {
				t.Fatalf("signing-key: %d %s", rec.Code, rec.Body)
			}
			return out
		}
		if k := key(); k.PublicKey != "" || k.Scheme != "v1a" {
			t.Fatalf("no signing key: %+v", k)
		}
		sk, err := wire.NewWebhookSigningKey()
		testenv.Must(t, err)
		_, err = s.SetChannelSigningKey(ctx, w.project, sk)
		testenv.Must(t, err)
		pk, _ := wire.WebhookPublicKey(sk)
		if k := key(); k.PublicKey != pk {
			t.Fatalf("signing key %+v, want %s", k, pk)
		}
	})
}
