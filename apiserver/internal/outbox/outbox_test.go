package outbox_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/apiserver/internal/agentapi"
	"github.com/svc-dev/svc/apiserver/internal/apierr"
	"github.com/svc-dev/svc/apiserver/internal/auth"
	"github.com/svc-dev/svc/apiserver/internal/httpmw"
	"github.com/svc-dev/svc/apiserver/internal/outbox"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/apiserver/internal/webhookapi"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/wire"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// world is one API replica over a store, with a member, a project and its
// channel (secret "sec"), and a second project with its own channel.
type world struct {
	t         *testing.T
	s         *store.Store
	api       *outbox.Outbox
	e         *echo.Echo
	project   string
	channel   string
	other     string // another project's channel id
	userID    string
	noChannel string // a project without a channel
}

func newWorld(t *testing.T, s *store.Store) *world {
	t.Helper()
	ctx := context.Background()
	ws, err := s.CreateWorkspace(ctx, "acme", "free")
	testenv.Must(t, err)
	u, err := s.CreateUser(ctx, "dev@acme.test")
	testenv.Must(t, err)
	_, err = s.AddMember(ctx, ws.ID, u.ID)
	testenv.Must(t, err)
	w := &world{t: t, s: s, userID: u.ID}
	sec := "sec"
	for i, dst := range []*string{&w.project, &w.other} {
		p, err := s.CreateProject(ctx, ws.ID, "p")
		testenv.Must(t, err)
		ch, err := s.SetChannel(ctx, p.ID, &sec, nil)
		testenv.Must(t, err)
		if i == 0 {
			w.project, w.channel = p.ID, ch.ID
		} else {
			*dst = ch.ID
		}
	}
	p, err := s.CreateProject(ctx, ws.ID, "bare")
	testenv.Must(t, err)
	w.noChannel = p.ID
	w.api, w.e = w.replica()
	return w
}

// replica is another API process on the same database.
func (w *world) replica() (*outbox.Outbox, *echo.Echo) {
	api := outbox.New(w.s, zaptest.NewLogger(w.t))
	e := echo.New()
	e.HTTPErrorHandler = apierr.Handler(zaptest.NewLogger(w.t))
	runtime := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			httpmw.SetPrincipal(c, auth.Principal{ProjectID: c.Request().Header.Get("X-Test-Runtime")})
			return next(c)
		}
	}
	member := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			httpmw.SetPrincipal(c, auth.Principal{KeyID: "key_1", UserID: w.userID})
			return next(c)
		}
	}
	// The routes of server.routes, with stand-in authentication (the
	// caller's identity comes from test headers).
	agent := &agentapi.API{Outbox: api}
	e.POST(internalapi.ProjectGroup+internalapi.PathOutbox, agent.OutboxPut, runtime)
	e.GET(internalapi.ProjectGroup+internalapi.PathOutboxPending, agent.OutboxPending, runtime)
	poll := (&webhookapi.Handlers{Outbox: api, Channels: w.s}).Poll
	e.GET("/api/projects/:id/agent-proxy"+internalapi.PodWebhook+"/outbox/:channelId", poll,
		member, httpmw.ProjectMember(w.s, "id"))
	return api, e
}

type answer struct {
	status int
	body   []byte
}

func (a answer) code() string {
	var env wire.ErrorBody
	_ = json.Unmarshal(a.body, &env)
	return env.Error.Code
}

func (a answer) messages(t *testing.T) []wire.OutboxMessage {
	t.Helper()
	var r wire.OutboxResponse
	if a.status != 200 || json.Unmarshal(a.body, &r) != nil || r.Messages == nil {
		t.Fatalf("poll: %d %s", a.status, a.body)
	}
	return r.Messages
}

func serve(e *echo.Echo, req *http.Request) answer {
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	return answer{rec.Code, rec.Body.Bytes()}
}

func (w *world) put(e *echo.Echo, runtimeOf, project string, body any) answer {
	b, _ := json.Marshal(body)
	req := httptest.NewRequest(http.MethodPost, "/internal/projects/"+project+"/outbox", strings.NewReader(string(b)))
	req.Header.Set("X-Test-Runtime", runtimeOf)
	return serve(e, req)
}

func (w *world) poll(e *echo.Echo, project, channel, query, secret string) answer {
	req := httptest.NewRequest(http.MethodGet, "/api/projects/"+project+"/agent-proxy/agent/channels/webhook/outbox/"+channel+query, nil)
	if secret != "" {
		req.Header.Set(wire.HeaderWebhookSecret, secret)
	}
	return serve(e, req)
}

func (w *world) msg(corr string) wire.OutboxPut {
	return wire.OutboxPut{ChannelID: w.channel, OutboxReply: wire.OutboxReply{CorrelationID: corr, Reply: "reply of " + corr,
		Metadata: json.RawMessage(`{"ticket":42}`), CreatedAt: time.Date(2025, 5, 6, 7, 8, 9, 0, time.UTC)}}
}

func TestPutIsIdempotentAndPollAcknowledges(t *testing.T) {
	t.Parallel()
	storetest.EachWith(t, newWorld, func(t *testing.T, w *world) {
		if a := w.put(w.e, w.project, w.project, w.msg("cor_1")); a.status != http.StatusCreated {
			t.Fatalf("first put: %d %s", a.status, a.body)
		}
		if a := w.put(w.e, w.project, w.project, w.msg("cor_1")); a.status != http.StatusOK || !strings.Contains(string(a.body), `"created":false`) {
			t.Fatalf("retried put: %d %s", a.status, a.body)
		}
		got := w.poll(w.e, w.project, w.channel, "", "sec").messages(t)
		if len(got) != 1 || got[0].CorrelationID != "cor_1" || got[0].Reply != "reply of cor_1" ||
			string(got[0].Metadata) != `{"ticket":42}` || !got[0].CreatedAt.Equal(w.msg("").CreatedAt) || got[0].ID == "" {
			t.Fatalf("poll = %+v", got)
		}
		if again := w.poll(w.e, w.project, w.channel, "?wait=0", "sec").messages(t); len(again) != 0 {
			t.Fatalf("acknowledged messages came back: %+v", again)
		}
		// limit: default 20, at most what was asked.
		for i := range 25 {
			w.put(w.e, w.project, w.project, w.msg("cor_many_"+string(rune('a'+i))))
		}
		if n := len(w.poll(w.e, w.project, w.channel, "", "sec").messages(t)); n != 20 {
			t.Fatalf("default limit returned %d", n)
		}
		if n := len(w.poll(w.e, w.project, w.channel, "?limit=2", "sec").messages(t)); n != 2 {
			t.Fatalf("limit=2 returned %d", n)
		}
	})
}

func TestPutChecks(t *testing.T) {
	t.Parallel()
	storetest.EachWith(t, newWorld, func(t *testing.T, w *world) {
		bad := w.msg("cor_x")
		bad.Metadata = json.RawMessage(`[1]`)
		bad.CorrelationID = ""
		cases := []struct {
			name, runtime, project string
			body                   any
			status                 int
			code                   string
		}{
			{"another project's runtime", "prj_someone_else", w.project, w.msg("cor_x"), 403, "runtime_token_required"},
			{"an API key", "", w.project, w.msg("cor_x"), 403, "runtime_token_required"},
			{"another project's channel", w.project, w.project, wire.OutboxPut{ChannelID: w.other, OutboxReply: wire.OutboxReply{CorrelationID: "c", Reply: "r"}}, 404, "channel_not_found"},
			{"no channel at all", w.noChannel, w.noChannel, wire.OutboxPut{ChannelID: w.channel, OutboxReply: wire.OutboxReply{CorrelationID: "c", Reply: "r"}}, 404, "channel_not_found"},
			{"invalid fields", w.project, w.project, bad, 400, "invalid_outbox_message"},
			{"not JSON", w.project, w.project, "nope", 400, "invalid_body"},
		}
		for _, c := range cases {
			if a := w.put(w.e, c.runtime, c.project, c.body); a.status != c.status || a.code() != c.code {
				t.Errorf("%s: %d %s, want %d %s", c.name, a.status, a.body, c.status, c.code)
			}
		}
		if a := w.put(w.e, w.project, w.project, bad); !strings.Contains(string(a.body), "correlationId") || !strings.Contains(string(a.body), "metadata") {
			t.Errorf("400 names the fields: %s", a.body)
		}
		if n, _ := w.s.CountOutbox(context.Background(), w.project, w.channel); n != 0 {
			t.Fatalf("refused puts stored %d rows", n)
		}
	})
}

// The pod's health asks how many messages the durable outbox holds: what a
// poll would return, for the project's own runtime only.
func TestPending(t *testing.T) {
	t.Parallel()
	storetest.EachWith(t, newWorld, func(t *testing.T, w *world) {
		pending := func(runtimeOf, project string) (answer, wire.OutboxPending) {
			req := httptest.NewRequest(http.MethodGet, internalapi.ProjectPath(project, internalapi.PathOutboxPending), nil)
			req.Header.Set("X-Test-Runtime", runtimeOf)
			a := serve(w.e, req)
			var p wire.OutboxPending
			_ = json.Unmarshal(a.body, &p)
			return a, p
		}
		if a, p := pending(w.project, w.project); a.status != 200 || p.Pending != 0 || p.ChannelID != w.channel {
			t.Fatalf("empty: %d %s", a.status, a.body)
		}
		w.put(w.e, w.project, w.project, w.msg("cor_1"))
		w.put(w.e, w.project, w.project, w.msg("cor_2"))
		if a, p := pending(w.project, w.project); a.status != 200 || p.Pending != 2 || p.ChannelID != w.channel {
			t.Fatalf("two put: %d %s", a.status, a.body)
		}
		w.poll(w.e, w.project, w.channel, "?limit=1", "sec").messages(t)
		if a, p := pending(w.project, w.project); a.status != 200 || p.Pending != 1 {
			t.Fatalf("one polled: %d %s", a.status, a.body)
		}
		for _, c := range []struct {
			name, runtime, project string
			status                 int
			code                   string
		}{
			{"another project's runtime", "prj_someone_else", w.project, 403, "runtime_token_required"},
			{"an API key", "", w.project, 403, "runtime_token_required"},
			{"no channel", w.noChannel, w.noChannel, 404, "channel_not_found"},
		} {
			if a, _ := pending(c.runtime, c.project); a.status != c.status || a.code() != c.code {
				t.Errorf("%s: %d %s, want %d %s", c.name, a.status, a.body, c.status, c.code)
			}
		}
	})
}

// Channel auth and parameters of the poll (cloud auth is the middleware's,
// tested end to end).
func TestPollChecks(t *testing.T) {
	t.Parallel()
	storetest.EachWith(t, newWorld, func(t *testing.T, w *world) {
		w.put(w.e, w.project, w.project, w.msg("cor_1"))
		empty := ""
		_, err := w.s.SetChannel(context.Background(), w.noChannel, &empty, nil)
		testenv.Must(t, err)
		cases := []struct {
			name, project, channel, query, secret string
			status                                int
			code                                  string
		}{
			{"no secret", w.project, w.channel, "", "", 401, "invalid_webhook_secret"},
			{"wrong secret", w.project, w.channel, "", "nope", 401, "invalid_webhook_secret"},
			{"another project's channel", w.project, w.other, "", "sec", 404, "channel_not_found"},
			{"empty channel secret", w.noChannel, "ch_x", "", "", 401, "channel_secret_not_set"},
			{"bad wait", w.project, w.channel, "?wait=abc", "sec", 400, "invalid_wait"},
			{"bad limit", w.project, w.channel, "?limit=0", "sec", 400, "invalid_limit"},
		}
		for _, c := range cases {
			if a := w.poll(w.e, c.project, c.channel, c.query, c.secret); a.status != c.status || a.code() != c.code {
				t.Errorf("%s: %d %s, want %d %s", c.name, a.status, a.body, c.status, c.code)
			}
		}
		if n, _ := w.s.CountOutbox(context.Background(), w.project, w.channel); n != 1 {
			t.Fatalf("refused polls took messages: %d left", n)
		}
	})
}

// A waiting poll returns as soon as a message is put through the same
// replica (no database poll needed), and a message put through another
// replica is found by the database poll.
func TestLongPollWakesOnPut(t *testing.T) {
	t.Parallel()
	storetest.EachWith(t, newWorld, func(t *testing.T, w *world) {
		w.api.PollInterval = time.Hour // only the in-process wakeup can end the wait early
		polled := make(chan answer, 1)
		start := time.Now()
		go func() { polled <- w.poll(w.e, w.project, w.channel, "?wait=30", "sec") }()
		if a := w.put(w.e, w.project, w.project, w.msg("cor_now")); a.status != 201 {
			t.Fatalf("put: %d %s", a.status, a.body)
		}
		got := (<-polled).messages(t)
		if len(got) != 1 || got[0].CorrelationID != "cor_now" || time.Since(start) > 20*time.Second {
			t.Fatalf("poll = %+v after %s", got, time.Since(start))
		}

		other, otherEcho := w.replica()
		other.PollInterval = 10 * time.Millisecond
		go func() { polled <- w.poll(otherEcho, w.project, w.channel, "?wait=30", "sec") }()
		w.put(w.e, w.project, w.project, w.msg("cor_elsewhere")) // through the first replica
		got = (<-polled).messages(t)
		if len(got) != 1 || got[0].CorrelationID != "cor_elsewhere" {
			t.Fatalf("cross-replica poll = %+v", got)
		}

		// With nothing to fetch, the poll answers an empty list when the wait ends.
		if got := w.poll(w.e, w.project, w.channel, "?wait=50ms", "sec").messages(t); len(got) != 0 {
			t.Fatalf("empty poll = %+v", got)
		}
	})
}
