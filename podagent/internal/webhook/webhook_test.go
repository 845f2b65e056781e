package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/podagent/internal/agentloop"
	"github.com/svc-dev/svc/podagent/internal/agentloop/fakegateway"
	"github.com/svc-dev/svc/podagent/internal/callback"
	"github.com/svc-dev/svc/podagent/internal/callback/callbacktest"
	"github.com/svc-dev/svc/podagent/internal/server"
	"github.com/svc-dev/svc/podagent/internal/webhook"
	"github.com/svc-dev/svc/shared/wire"
)

const (
	runtimeToken = "rt-token"
	secret       = "chan-secret"
	channelID    = "ch_test"
)

// source is a channel config the test can change.
type source struct {
	mu  sync.Mutex
	cfg wire.ChannelConfig
	err error
}

func (s *source) Channel(context.Context) (wire.ChannelConfig, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg, s.err
}

func (s *source) set(cfg wire.ChannelConfig, err error) {
	s.mu.Lock()
	s.cfg, s.err = cfg, err
	s.mu.Unlock()
}

// agent is a scripted Agent.
type agent struct {
	mu   sync.Mutex
	reqs []agentloop.Request
	run  func(ctx context.Context, req agentloop.Request) (agentloop.Result, error)
}

func (a *agent) Run(ctx context.Context, req agentloop.Request) (agentloop.Result, error) {
	a.mu.Lock()
	a.reqs = append(a.reqs, req)
	run := a.run
	a.mu.Unlock()
	if run == nil {
		return agentloop.Result{Reply: "echo: " + req.Message}, nil
	}
	return run(ctx, req)
}

func (a *agent) setRun(fn func(ctx context.Context, req agentloop.Request) (agentloop.Result, error)) {
	a.mu.Lock()
	a.run = fn
	a.mu.Unlock()
}

func (a *agent) Requests() []agentloop.Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]agentloop.Request(nil), a.reqs...)
}

type env struct {
	t      testing.TB
	srv    *httptest.Server
	h      *webhook.Handler
	src    *source
	agent  *agent
	ready  func() error
	readyM sync.Mutex
}

type opts struct {
	syncTimeout time.Duration
	maxBody     int64
	attempts    int
	agent       webhook.Agent
	// committer commits what the agent's tools changed (nil: nothing).
	committer interface {
		Turn(ctx context.Context, message string) (string, error)
	}
	// denyLoopback: SVC_CALLBACK_ALLOWED_NETS empty (default guard).
	denyLoopback bool
	// outbox: nil means the in-memory outbox the pod serves itself.
	outbox webhook.Outbox
	// durable: the API's outbox count (nil: no API).
	durable webhook.DurableOutbox
	// recorder takes the attempt records (nil: none).
	recorder callback.Recorder
}

func logger(t testing.TB) *zap.Logger {
	if _, ok := t.(*testing.B); ok {
		return zap.NewNop()
	}
	return zaptest.NewLogger(t)
}

func newEnv(t testing.TB, o opts) *env {
	t.Helper()
	ev := &env{t: t, agent: &agent{}, src: &source{cfg: wire.ChannelConfig{Configured: true, ChannelID: channelID, Secret: secret,
		CallbackHeaders: map[string]string{"X-Tenant": "acme"}}}}
	if o.attempts == 0 {
		o.attempts = 3
	}
	var a webhook.Agent = ev.agent
	if o.agent != nil {
		a = o.agent
	}
	allowed := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	if o.denyLoopback {
		allowed = nil
	}
	cb := callback.New(callback.Options{Guard: callback.NewGuard(allowed),
		Attempts: o.attempts, Log: logger(t), Recorder: o.recorder,
		Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }})
	ev.h = webhook.New(webhook.Deps{
		Channel: ev.src, Agent: a, Committer: o.committer, Callbacks: cb, Log: logger(t),
		Ready: func() error {
			ev.readyM.Lock()
			defer ev.readyM.Unlock()
			if ev.ready != nil {
				return ev.ready()
			}
			return nil
		},
		SyncTimeout: o.syncTimeout, MaxBodyBytes: o.maxBody, Outbox: o.outbox, Durable: o.durable,
	})
	e := server.New(server.Options{RuntimeToken: runtimeToken, Webhook: ev.h, Log: logger(t)})
	ev.srv = httptest.NewServer(e)
	t.Cleanup(func() {
		ev.srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := ev.h.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return ev
}

type resp struct {
	status int
	body   []byte
	header http.Header
}

func (r resp) json(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decoding %s: %v", r.body, err)
	}
}

func (r resp) code(t testing.TB) string {
	var eb wire.ErrorBody
	_ = json.Unmarshal(r.body, &eb)
	return eb.Error.Code
}

func (ev *env) do(method, path string, hdr map[string]string, body io.Reader) resp {
	ev.t.Helper()
	req, err := http.NewRequest(method, ev.srv.URL+webhook.Prefix+path, body)
	if err != nil {
		ev.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+runtimeToken)
	req.Header.Set(wire.HeaderWebhookSecret, secret)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	res, err := ev.srv.Client().Do(req)
	if err != nil {
		ev.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{res.StatusCode, b, res.Header}
}

func (ev *env) post(body string) resp {
	return ev.do(http.MethodPost, "/incoming", nil, strings.NewReader(body))
}

func TestIncomingAuthAndBodyMatrix(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		setup  func(ev *env)
		hdr    map[string]string
		body   string
		status int
		code   string
	}{
		{name: "ok", body: `{"message":"hi"}`, status: 200},
		{name: "no runtime token", hdr: map[string]string{"Authorization": ""}, body: `{"message":"hi"}`, status: 401, code: "invalid_runtime_token"},
		{name: "wrong runtime token", hdr: map[string]string{"Authorization": "Bearer nope"}, body: `{"message":"hi"}`, status: 401, code: "invalid_runtime_token"},
		{name: "channel secret missing", hdr: map[string]string{wire.HeaderWebhookSecret: ""}, body: `{"message":"hi"}`, status: 401, code: "invalid_webhook_secret"},
		{name: "channel secret wrong", hdr: map[string]string{wire.HeaderWebhookSecret: "chan-secreT"}, body: `{"message":"hi"}`, status: 401, code: "invalid_webhook_secret"},
		{name: "channel secret prefix", hdr: map[string]string{wire.HeaderWebhookSecret: "chan"}, body: `{"message":"hi"}`, status: 401, code: "invalid_webhook_secret"},
		{name: "empty channel secret rejects all", setup: func(ev *env) {
			ev.src.set(wire.ChannelConfig{Configured: true, ChannelID: channelID}, nil)
		}, hdr: map[string]string{wire.HeaderWebhookSecret: ""}, body: `{"message":"hi"}`, status: 401, code: "channel_secret_not_set"},
		{name: "no channel configured", setup: func(ev *env) { ev.src.set(wire.ChannelConfig{}, nil) },
			body: `{"message":"hi"}`, status: 401, code: "channel_secret_not_set"},
		{name: "channel config unavailable", setup: func(ev *env) { ev.src.set(wire.ChannelConfig{}, errors.New("api down")) },
			body: `{"message":"hi"}`, status: 503, code: "channel_config_unavailable"},
		{name: "agent not ready", setup: func(ev *env) { ev.ready = func() error { return errors.New("fenced") } },
			body: `{"message":"hi"}`, status: 503, code: "agent_not_ready"},
		{name: "no body", body: ``, status: 400, code: "invalid_body"},
		{name: "not json", body: `message=hi`, status: 400, code: "invalid_json"},
		{name: "json array", body: `["hi"]`, status: 400, code: "invalid_json"},
		{name: "two objects", body: `{"message":"a"}{"message":"b"}`, status: 400, code: "invalid_json"},
		{name: "message missing", body: `{"senderId":"u"}`, status: 400, code: "missing_message"},
		{name: "message null", body: `{"message":null}`, status: 400, code: "missing_message"},
		{name: "message number", body: `{"message":42}`, status: 400, code: "invalid_message"},
		{name: "message object", body: `{"message":{"text":"hi"}}`, status: 400, code: "invalid_message"},
		{name: "message empty", body: `{"message":"  "}`, status: 400, code: "invalid_message"},
		{name: "senderId number", body: `{"message":"hi","senderId":7}`, status: 400, code: "invalid_sender_id"},
		{name: "sender_name bool", body: `{"message":"hi","sender_name":true}`, status: 400, code: "invalid_sender_name"},
		{name: "metadata array", body: `{"message":"hi","metadata":[1]}`, status: 400, code: "invalid_metadata"},
		{name: "metadata string", body: `{"message":"hi","metadata":"x"}`, status: 400, code: "invalid_metadata"},
		{name: "metadata null ok", body: `{"message":"hi","metadata":null}`, status: 200},
		{name: "callbackUrl not http", body: `{"message":"hi","callbackUrl":"ftp://example.com/x"}`, status: 400, code: "invalid_callback_url"},
		{name: "callbackUrl number", body: `{"message":"hi","callbackUrl":1}`, status: 400, code: "invalid_callback_url"},
		{name: "callbackUrl metadata IP", body: `{"message":"hi","callback_url":"http://169.254.169.254/latest"}`, status: 400, code: "callback_url_refused"},
		{name: "callbackUrl private IP", body: `{"message":"hi","callbackUrl":"http://10.0.0.1/hook"}`, status: 400, code: "callback_url_refused"},
		{name: "too large", body: `{"message":"` + strings.Repeat("x", 5000) + `"}`, status: 413, code: "request_too_large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := newEnv(t, opts{maxBody: 4096})
			if tc.setup != nil {
				tc.setup(ev)
			}
			r := ev.do(http.MethodPost, "/incoming", tc.hdr, strings.NewReader(tc.body))
			if r.status != tc.status || (tc.code != "" && r.code(t) != tc.code) {
				t.Fatalf("got %d %s, want %d %s", r.status, r.body, tc.status, tc.code)
			}
			if tc.status != 200 && len(ev.agent.Requests()) != 0 {
				t.Fatal("a rejected request reached the agent")
			}
		})
	}
}

func TestTooLargeChunkedBody(t *testing.T) {
	t.Parallel()
	ev := newEnv(t, opts{maxBody: 1024})
	// No Content-Length: the limit applies while reading.
	r := ev.do(http.MethodPost, "/incoming", nil, io.MultiReader(strings.NewReader(`{"message":"`),
		strings.NewReader(strings.Repeat("y", 4096)), strings.NewReader(`"}`)))
	if r.status != 413 || r.code(t) != "request_too_large" {
		t.Fatalf("got %d %s", r.status, r.body)
	}
}

func TestSyncReplyAndFieldsReachTheAgent(t *testing.T) {
	t.Parallel()
	ev := newEnv(t, opts{})
	meta := `{ "ticket": 42, "nested": {"z": [1, 2], "a": null} }`
	r := ev.post(`{"message":"hello","sender_id":"u-7","sender_name":"Ada","metadata":` + meta + `}`)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var rep wire.WebhookReply
	r.json(t, &rep)
	if rep.Reply != "echo: hello" {
		t.Fatalf("reply %q", rep.Reply)
	}
	reqs := ev.agent.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d agent requests", len(reqs))
	}
	got := reqs[0]
	if got.Message != "hello" || got.SenderID != "u-7" || got.SenderName != "Ada" || string(got.Metadata) != meta ||
		got.Channel != "webhook" || !strings.HasPrefix(got.CorrelationID, "cor_") {
		t.Fatalf("agent request = %+v", got)
	}
	// camelCase wins when both spellings are present.
	ev.post(`{"message":"again","senderId":"camel","sender_id":"snake"}`)
	if got := ev.agent.Requests()[1]; got.SenderID != "camel" {
		t.Fatalf("senderId = %q", got.SenderID)
	}
}

// A failed turn answers what the caller can act on: the
// workspace's plan limits hit by the agent's model calls are 429 with
// Retry-After and 402 with resets_at (as the public API answers them), a
// full workspace disk is 507 naming it, anything else 502 with the agent's
// plain-words reply; every answer carries the correlationId.
func TestSyncAgentErrorGivesClearAnswer(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		err        error
		status     int
		typ, code  string
		retryAfter string
		resetsAt   string
		msg        string
	}{
		{"rate limit", &agentloop.Error{Code: "rate_limited", Message: "20 requests per minute", Status: 429, RetryAfter: 7 * time.Second},
			429, "rate_limit_error", "rate_limited", "7", "", "20 requests per minute"},
		{"credits", &agentloop.Error{Code: "usage_limit_reached", Message: "out of credits", Status: 402, ResetsAt: "2030-01-01T00:00:00Z"},
			402, "billing_error", "usage_limit_reached", "", "2030-01-01T00:00:00Z", "out of credits"},
		{"full workspace disk", &agentloop.Error{Code: "commit_failed", Message: "the agent's changes could not be committed",
			Cause: fmt.Errorf("git add: exit status 128: fatal: unable to write new index file: No space left on device")},
			507, "server_error", "insufficient_storage", "", "", "SVC_WORKSPACE_DIR"},
		{"other", &agentloop.Error{Code: "max_iterations", Message: "the agent stopped"},
			502, "server_error", "max_iterations", "", "", "could not complete"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ev := newEnv(t, opts{})
			ev.agent.setRun(func(context.Context, agentloop.Request) (agentloop.Result, error) {
				return agentloop.Result{Reply: "The agent could not complete this request."}, tc.err
			})
			r := ev.post(`{"message":"hi"}`)
			var eb wire.ErrorBody
			r.json(t, &eb)
			if r.status != tc.status || eb.Error.Type != tc.typ || eb.Error.Code != tc.code ||
				!strings.Contains(eb.Error.Message, tc.msg) || eb.Error.CorrelationID == "" {
				t.Fatalf("got %d %s", r.status, r.body)
			}
			if got := r.header.Get("Retry-After"); got != tc.retryAfter {
				t.Fatalf("Retry-After %q, want %q", got, tc.retryAfter)
			}
			if eb.Error.ResetsAt != tc.resetsAt {
				t.Fatalf("resets_at %q, want %q", eb.Error.ResetsAt, tc.resetsAt)
			}
		})
	}
}

// An accepted async message asks the agent to wait out plan limits within
// its turn's deadline; a sync one does not (it answers 429/402 at once).
func TestAsyncTurnsWaitForPlanLimits(t *testing.T) {
	t.Parallel()
	ev := newEnv(t, opts{})
	got := make(chan agentloop.Request, 2)
	ev.agent.setRun(func(_ context.Context, req agentloop.Request) (agentloop.Result, error) {
		got <- req
		return agentloop.Result{Reply: "ok"}, nil
	})
	ev.post(`{"message":"sync"}`)
	if r := ev.post(`{"message":"async","callbackUrl":"` + ev.srv.URL + `/nowhere"}`); r.status != 202 {
		t.Fatalf("async: %d %s", r.status, r.body)
	}
	var reqs []agentloop.Request
	for len(reqs) < 2 {
		select {
		case req := <-got:
			reqs = append(reqs, req)
		case <-time.After(30 * time.Second):
			t.Fatalf("only %d turns ran", len(reqs))
		}
	}
	if reqs[0].WaitForLimits || !reqs[1].WaitForLimits {
		t.Fatalf("WaitForLimits sync=%v async=%v, want false and true", reqs[0].WaitForLimits, reqs[1].WaitForLimits)
	}
}

func TestSyncTimeoutThenOutboxLongPoll(t *testing.T) {
	t.Parallel()
	ev := newEnv(t, opts{syncTimeout: 50 * time.Millisecond})
	release, r, eb := slowJob(t, ev)
	if r.status != http.StatusGatewayTimeout || eb.Error.Code != "reply_timeout" || !strings.HasPrefix(eb.Error.CorrelationID, "cor_") ||
		eb.Error.ChannelID != channelID {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	// Nothing pending yet: a poll without wait answers at once.
	if r := ev.do(http.MethodGet, "/outbox/"+channelID, nil, nil); r.status != 200 || string(bytes.TrimSpace(r.body)) != `{"messages":[]}` {
		t.Fatalf("empty poll: %d %s", r.status, r.body)
	}
	// A long poll is answered when the late reply arrives.
	polled := make(chan resp, 1)
	go func() { polled <- ev.do(http.MethodGet, "/outbox/"+channelID+"?wait=30&limit=5", nil, nil) }()
	close(release)
	pr := <-polled
	var ob wire.OutboxResponse
	pr.json(t, &ob)
	if pr.status != 200 || len(ob.Messages) != 1 {
		t.Fatalf("poll: %d %s", pr.status, pr.body)
	}
	m := ob.Messages[0]
	if m.CorrelationID != eb.Error.CorrelationID || m.Reply != "late: slow job" || string(m.Metadata) != `{"k":"v"}` ||
		!strings.HasPrefix(m.ID, "obx_") || m.CreatedAt.IsZero() {
		t.Fatalf("message = %+v", m)
	}
	// Acknowledged: gone.
	if r := ev.do(http.MethodGet, "/outbox/"+channelID, nil, nil); string(bytes.TrimSpace(r.body)) != `{"messages":[]}` {
		t.Fatalf("after ack: %s", r.body)
	}
	// Activity shows the timed-out inbound event and the outbox deposit.
	var act wire.WebhookActivity
	ev.do(http.MethodGet, "/activity", nil, nil).json(t, &act)
	statuses := map[string]bool{}
	for _, e := range act.Events {
		statuses[e.Direction+"/"+e.Status] = true
	}
	if !statuses["inbound/timed_out"] || !statuses["outbound/outboxed"] || !statuses["outbound/fetched"] {
		t.Fatalf("activity = %+v", act.Events)
	}
}

func TestOutboxRouteChecks(t *testing.T) {
	t.Parallel()
	ev := newEnv(t, opts{})
	for _, tc := range []struct {
		path, code string
		hdr        map[string]string
		status     int
	}{
		{"/outbox/ch_other", "channel_not_found", nil, 404},
		{"/outbox/" + channelID + "?wait=abc", "invalid_wait", nil, 400},
		{"/outbox/" + channelID + "?limit=0", "invalid_limit", nil, 400},
		{"/outbox/" + channelID, "invalid_webhook_secret", map[string]string{wire.HeaderWebhookSecret: "x"}, 401},
		{"/activity", "invalid_webhook_secret", map[string]string{wire.HeaderWebhookSecret: ""}, 401},
	} {
		r := ev.do(http.MethodGet, tc.path, tc.hdr, nil)
		if r.status != tc.status || r.code(t) != tc.code {
			t.Errorf("%s: %d %s", tc.path, r.status, r.body)
		}
	}
	for in, want := range map[string]time.Duration{"": 0, "5": 5 * time.Second, "0.5": 500 * time.Millisecond,
		"300ms": 300 * time.Millisecond, "90": 30 * time.Second} {
		if got, err := webhook.ParseWait(in); err != nil || got != want {
			t.Errorf("ParseWait(%q) = %v, %v", in, got, err)
		}
	}
	for in, want := range map[string]int{"": 20, "7": 7, "100": 100, "1000": 100} {
		if got, err := webhook.ParseLimit(in); err != nil || got != want {
			t.Errorf("ParseLimit(%q) = %v, %v", in, got, err)
		}
	}
}

func TestHealth(t *testing.T) {
	t.Parallel()
	ev := newEnv(t, opts{})
	var h wire.WebhookHealth
	ev.post(`{"message":"one"}`)
	// health needs the runtime token, not the channel secret.
	ev.do(http.MethodGet, "/health", map[string]string{wire.HeaderWebhookSecret: ""}, nil).json(t, &h)
	if !h.Connected || !h.HasSecret || h.MessageCount != 1 {
		t.Fatalf("health = %+v", h)
	}
	ev.src.set(wire.ChannelConfig{Configured: true, ChannelID: channelID}, nil)
	ev.do(http.MethodGet, "/health", nil, nil).json(t, &h)
	if !h.Connected || h.HasSecret {
		t.Fatalf("health without secret = %+v", h)
	}
	ev.src.set(wire.ChannelConfig{}, errors.New("down"))
	ev.do(http.MethodGet, "/health", nil, nil).json(t, &h)
	if h.Connected || h.HasSecret || h.Reason != wire.HealthConfigUnavailable {
		t.Fatalf("health without API = %+v", h)
	}
	// Fenced (the pod's readiness fails): reported, still a 200.
	ev.src.set(wire.ChannelConfig{Configured: true, ChannelID: channelID, Secret: secret}, nil)
	ev.readyM.Lock()
	ev.ready = func() error { return errors.New("fenced") }
	ev.readyM.Unlock()
	r := ev.do(http.MethodGet, "/health", nil, nil)
	r.json(t, &h)
	if r.status != 200 || h.Connected || h.Reason != wire.HealthFenced {
		t.Fatalf("health of a fenced pod = %d %+v", r.status, h)
	}
	// Shutting down.
	if err := ev.h.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	ev.do(http.MethodGet, "/health", nil, nil).json(t, &h)
	if h.Connected || h.Reason != wire.HealthShuttingDown {
		t.Fatalf("health while shutting down = %+v", h)
	}
	if r := ev.do(http.MethodGet, "/health", map[string]string{"Authorization": ""}, nil); r.status != 401 {
		t.Fatalf("health without runtime token: %d", r.status)
	}
}

// durableCount is the API's outbox as health sees it.
type durableCount struct {
	mu  sync.Mutex
	n   wire.OutboxPending
	err error
}

func (d *durableCount) set(n wire.OutboxPending, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n, d.err = n, err
}

func (d *durableCount) OutboxPending(context.Context, time.Duration) (wire.OutboxPending, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n, d.err
}

// outboxPending adds what the API's durable outbox holds to the pod's own
// copy, for the channel it serves.
func TestHealthCountsTheAPIOutbox(t *testing.T) {
	t.Parallel()
	d := &durableCount{}
	ev := newEnv(t, opts{durable: d})
	for _, tc := range []struct {
		name string
		n    wire.OutboxPending
		err  error
		want int
	}{
		{"the API holds two", wire.OutboxPending{ChannelID: channelID, Pending: 2}, nil, 2},
		{"the API holds none", wire.OutboxPending{ChannelID: channelID}, nil, 0},
		{"another channel's count is not ours", wire.OutboxPending{ChannelID: "ch_other", Pending: 5}, nil, 0},
		{"the API does not answer", wire.OutboxPending{}, errors.New("down"), 0},
	} {
		d.set(tc.n, tc.err)
		var h wire.WebhookHealth
		ev.do(http.MethodGet, "/health", nil, nil).json(t, &h)
		if h.OutboxPending != tc.want {
			t.Errorf("%s: outboxPending %d, want %d", tc.name, h.OutboxPending, tc.want)
		}
	}
}

func TestAsyncCallbackSigned(t *testing.T) {
	t.Parallel()
	ev := newEnv(t, opts{})
	rcv := callbacktest.New(t, 200)
	r := ev.post(`{"message":"async hi","senderId":"u1","callbackUrl":"` + rcv.URL + `/cb","metadata":{"thread":"t-9"}}`)
	var acc wire.WebhookAccepted
	r.json(t, &acc)
	if r.status != 202 || acc.Status != "accepted" || !strings.Contains(acc.Message, "callback URL") || acc.CorrelationID == "" {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	got := <-rcv.OK
	if err := callback.Verify(secret, got.Body, got.Header); err != nil {
		t.Fatalf("signature: %v", err)
	}
	if got.Header.Get("Content-Type") != "application/json" || got.Header.Get("X-Tenant") != "acme" ||
		!strings.HasPrefix(got.Header.Get("webhook-id"), "msg_") {
		t.Fatalf("headers = %v", got.Header)
	}
	var cb wire.WebhookCallback
	if err := json.Unmarshal(got.Body, &cb); err != nil {
		t.Fatal(err)
	}
	if cb.Reply != "echo: async hi" || cb.CorrelationID != acc.CorrelationID || string(cb.Metadata) != `{"thread":"t-9"}` {
		t.Fatalf("callback = %s", got.Body)
	}
}

func TestAsyncCallbackRetriedThenDelivered(t *testing.T) {
	t.Parallel()
	ev := newEnv(t, opts{attempts: 5})
	rcv := callbacktest.New(t, 503, 503, 200)
	r := ev.post(`{"message":"retry me","callbackUrl":"` + rcv.URL + `"}`)
	if r.status != 202 {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	<-rcv.OK
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ev.h.Shutdown(ctx); err != nil { // waits for the delivery to finish
		t.Fatal(err)
	}
	got := rcv.Got()
	if len(got) != 3 {
		t.Fatalf("%d callback requests", len(got))
	}
	successes := 0
	for _, g := range got {
		if g.Header.Get("webhook-id") != got[0].Header.Get("webhook-id") {
			t.Fatalf("webhook-id changed: %q vs %q", g.Header.Get("webhook-id"), got[0].Header.Get("webhook-id"))
		}
		if g.Status == 200 {
			successes++
		}
	}
	if successes != 1 {
		t.Fatalf("%d successful deliveries", successes)
	}
	var delivered *wire.ActivityEvent
	for _, e := range ev.h.Activity().List() {
		if e.Direction == wire.DirectionOutbound && e.Mode == "async" {
			delivered = &e
			break
		}
	}
	if delivered == nil || delivered.Status != wire.ActivityDelivered || delivered.Attempts != 3 {
		t.Fatalf("activity = %+v", delivered)
	}
	if ev.h.Outbox().Len(channelID) != 0 {
		t.Fatal("a delivered reply is in the outbox")
	}
}

func TestAsyncCallbackGivesUpToOutbox(t *testing.T) {
	t.Parallel()
	for _, tc := range []callbacktest.Refusal{
		{Name: "5xx schedule exhausted", Statuses: []int{500}, Requests: 3},
		{Name: "4xx stops", Statuses: []int{410}, Requests: 1},
	} {
		t.Run(tc.Name, func(t *testing.T) {
			ev := newEnv(t, opts{attempts: 3})
			rcv := callbacktest.New(t, tc.Statuses...)
			r := ev.post(`{"message":"nobody home","callbackUrl":"` + rcv.URL + `","metadata":{"m":1}}`)
			var acc wire.WebhookAccepted
			r.json(t, &acc)
			pr := ev.do(http.MethodGet, "/outbox/"+channelID+"?wait=30", nil, nil)
			var ob wire.OutboxResponse
			pr.json(t, &ob)
			if len(ob.Messages) != 1 || ob.Messages[0].CorrelationID != acc.CorrelationID || ob.Messages[0].Reply != "echo: nobody home" ||
				string(ob.Messages[0].Metadata) != `{"m":1}` {
				t.Fatalf("outbox = %s", pr.body)
			}
			if n := len(rcv.Got()); n != tc.Requests {
				t.Fatalf("%d callback requests", n)
			}
		})
	}
}

func TestAsyncCallbackToRefusedHostGoesToOutbox(t *testing.T) {
	t.Parallel()
	ev := newEnv(t, opts{denyLoopback: true})
	rcv := callbacktest.New(t, 200)
	port := rcv.URL[strings.LastIndexByte(rcv.URL, ':')+1:]
	// A literal loopback address is refused when the request arrives.
	if r := ev.post(`{"message":"ssrf","callbackUrl":"` + rcv.URL + `"}`); r.status != 400 || r.code(t) != "callback_url_refused" {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	// A name is resolved and refused at connect time: no request reaches
	// the receiver, no retry, and the reply waits in the outbox.
	r := ev.post(`{"message":"ssrf","callbackUrl":"http://localhost:` + port + `/x"}`)
	if r.status != 202 {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	pr := ev.do(http.MethodGet, "/outbox/"+channelID+"?wait=30", nil, nil)
	var ob wire.OutboxResponse
	pr.json(t, &ob)
	if len(ob.Messages) != 1 || len(rcv.Got()) != 0 {
		t.Fatalf("outbox = %s, receiver got %d", pr.body, len(rcv.Got()))
	}
	for _, e := range ev.h.Activity().List() {
		if e.Mode == "async" && e.Direction == wire.DirectionOutbound {
			if e.Attempts != 1 || !strings.Contains(e.Error, "refused") {
				t.Fatalf("activity = %+v", e)
			}
			return
		}
	}
	t.Fatal("no outbound activity")
}

func TestActivityRouteKeepsLast50(t *testing.T) {
	t.Parallel()
	ev := newEnv(t, opts{})
	for range 40 { // 2 events each: inbound + outbound sync reply
		if r := ev.post(`{"message":"m","senderId":"s"}`); r.status != 200 {
			t.Fatal(r.status)
		}
	}
	var act wire.WebhookActivity
	ev.do(http.MethodGet, "/activity", nil, nil).json(t, &act)
	if len(act.Events) != 50 {
		t.Fatalf("%d events", len(act.Events))
	}
	in := act.Events[1]
	if in.Direction != wire.DirectionInbound || in.Status != wire.ActivityReplied || in.SenderID != "s" || in.Preview != "m" ||
		in.CreatedAt.IsZero() || in.FinishedAt.IsZero() || in.LastTriggeredAt.IsZero() || in.Mode != "sync" {
		t.Fatalf("inbound event = %+v", in)
	}
	if out := act.Events[0]; out.Direction != wire.DirectionOutbound || out.Preview != "echo: m" {
		t.Fatalf("outbound event = %+v", out)
	}
}

func TestShutdownRefusesNewMessages(t *testing.T) {
	t.Parallel()
	ev := newEnv(t, opts{})
	if err := ev.h.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := ev.post(`{"message":"late"}`); r.status != 503 || r.code(t) != "shutting_down" {
		t.Fatalf("got %d %s", r.status, r.body)
	}
}

// The real tool loop behind the route: files written, one commit.
func TestSyncWithToolLoop(t *testing.T) {
	t.Parallel()
	gw := fakegateway.New(t, "prj_1", runtimeToken)
	ws := t.TempDir()
	cm := &committer{}
	a, err := agentloop.New(agentloop.Options{APIURL: gw.URL, ProjectID: "prj_1", Token: runtimeToken, Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	gw.Sequence(
		fakegateway.Reply{ToolCalls: []fakegateway.ToolCall{{ID: "1", Name: "write_file", Arguments: `{"path":"notes/todo.md","content":"- ship\n"}`}}},
		fakegateway.Reply{Text: "Added notes/todo.md"},
	)
	ev := newEnv(t, opts{agent: a, committer: cm})
	r := ev.post(`{"message":"add a todo","metadata":{"issue":5}}`)
	var rep wire.WebhookReply
	r.json(t, &rep)
	if r.status != 200 || rep.Reply != "Added notes/todo.md" {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "notes", "todo.md")); err != nil || string(b) != "- ship\n" {
		t.Fatalf("file: %q %v", b, err)
	}
	if cm.n() != 1 {
		t.Fatalf("%d commits", cm.n())
	}
}

type committer struct {
	mu    sync.Mutex
	calls int
}

func (c *committer) Turn(context.Context, string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	return "abc", nil
}

func (c *committer) n() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

// slowJob posts a message whose agent answers only when release is closed,
// and returns the (timed-out) answer and its error body.
func slowJob(t *testing.T, ev *env) (chan struct{}, resp, wire.ErrorBody) {
	t.Helper()
	release := make(chan struct{})
	ev.agent.setRun(func(ctx context.Context, req agentloop.Request) (agentloop.Result, error) {
		<-release
		return agentloop.Result{Reply: "late: " + req.Message}, nil
	})
	r := ev.post(`{"message":"slow job","metadata":{"k":"v"}}`)
	var eb wire.ErrorBody
	r.json(t, &eb)
	return release, r, eb
}
