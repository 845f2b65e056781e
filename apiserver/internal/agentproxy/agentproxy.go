// Package agentproxy is the API side of the webhook channel (spec 1, 4.2,
// 5.2, 7.2; docs/design.md §5 and §6):
//
//	/api/projects/{projectId}/agent-proxy/agent/channels/webhook/{incoming,health,activity,outbox/{channelId}}
//
// Routes are mounted behind cloud auth (an API key of a member of the
// project's workspace: httpmw.APIKey then httpmw.ProjectMember), so a request
// that fails it never reaches the agent. The proxy then asks the runtime
// driver for the project's agent — a local podagent, a pod, or a paired
// machine through its tunnel: the URL is the same whatever runs it — and
// forwards the request: body, query and X-Webhook-Secret unchanged, the
// client's Authorization replaced by the project's runtime token, hop-by-hop
// headers dropped. The answer streams back as it comes. A request is sent at
// most once: the proxy never retries.
//
// A project whose paired machine's tunnel lives on another API replica is
// reached through that replica's relay route (package pairing):
//
//	/internal/projects/{projectId}/relay/{the same agent paths}
//
// served by a second Proxy with Relay set, behind runtime-token auth of the
// project and over the replica's local tunnels only. The relay hop is sent
// at most once too.
//
// The outbox poll (GET .../outbox/{channelId}) is not proxied: the server
// mounts package outbox's route, which serves it from the database, on the
// same group ahead of this catch-all.
package agentproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/httpmw"
	"github.com/svc-dev/svc/apiserver/internal/runtimes"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/webhookchannel"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/wire"
)

// DefaultTimeout bounds one proxied exchange. It is above the agent's own
// 120 s sync reply timeout (spec 8), so the agent's 504 reply_timeout with its
// correlationId reaches the caller rather than a proxy timeout.
const DefaultTimeout = 150 * time.Second

// DefaultPrefixes are the agent paths the proxy forwards: the channel routes
// and the pod's health probes. Other /agent/* routes (git-flush) are the
// API's own business and are not reachable through the proxy.
var DefaultPrefixes = []string{internalapi.PodChannels, internalapi.PodHealthz, internalapi.PodReadyz}

// RelayPrefixes are the paths another replica may relay: the proxied ones
// and the pod's git-flush, which the API itself calls for publish (spec
// 10.4). The relay route is reachable only with the project's runtime
// token, the credential git-flush itself requires.
var RelayPrefixes = append(append([]string(nil), DefaultPrefixes...), internalapi.PodGitFlush)

// Proxy forwards agent-proxy requests to the project's runtime.
type Proxy struct {
	// Runtime finds or starts the project's agent (runtimes.Router).
	Runtime runtimes.Driver
	// Transport carries requests to endpoints without their own transport.
	Transport http.RoundTripper
	// Timeout bounds the exchange with the agent (DefaultTimeout when zero);
	// a cold start has its own bound in the driver.
	Timeout time.Duration
	// Prefixes are the forwarded agent paths (DefaultPrefixes when nil): a
	// path equal to one, or under one ending in "/".
	Prefixes []string
	// Relay: this proxy serves the relay route of another replica's
	// agent-proxy (/internal/projects/{id}/relay/*, behind httpmw.Runtime):
	// the project is the runtime token's, the agent path follows /relay, and
	// the X-Forwarded-* headers of the first hop are kept.
	Relay bool
	// Channels, when set, is where the proxy reads the project's webhook
	// channel to check X-Webhook-Secret (and an incoming message's body)
	// before it routes a channel request: a request the pod would refuse
	// is refused here, whether or not an agent runs, and never starts one
	// (channel.go). The pod checks again.
	Channels webhookchannel.Store
	// MaxBodyBytes bounds an incoming message read for that check
	// (DefaultMaxBodyBytes when zero; 413 above).
	MaxBodyBytes int64
	// Pending, when set, counts the channel's replies waiting in the API's
	// durable outbox (outbox.Outbox.Pending): the health the API answers
	// for an agent that is not serving reports them.
	Pending func(ctx context.Context, projectID string) (wire.OutboxPending, error)
	// Accepted, when set, records an async message the agent accepted (its
	// 202 to POST .../incoming), before the 202 reaches the caller
	// (outbox.Outbox.RecordAccepted). A failure is logged: the pod's own
	// journal still holds the message.
	Accepted func(ctx context.Context, projectID, correlationID string) error
	Log      *zap.Logger
}

// NewTransport returns the transport for agents reached over the network: no
// response-header timeout (a sync turn may take 120 s), no transparent
// compression (the body passes through as the agent wrote it).
func NewTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   32,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		ExpectContinueTimeout: time.Second,
	}
}

// Handle proxies one request; ProjectMember has loaded the project (Relay:
// httpmw.Runtime has checked the project's runtime token, and the project's
// id is all the relay's driver needs).
func (p *Proxy) Handle(c echo.Context) error {
	if p.Relay {
		return p.serve(c, store.Project{ID: httpmw.PrincipalFrom(c).ProjectID})
	}
	return p.serve(c, httpmw.ProjectFrom(c))
}

func (p *Proxy) serve(c echo.Context, proj store.Project) error {
	req := c.Request()
	marker := "/agent-proxy/"
	if p.Relay {
		marker = "/relay/"
	}
	rest, rawRest, ok := agentPath(req.URL, marker)
	if !ok || !p.allowed(rest) {
		return wire.Coded("not_found", "No such agent route.")
	}
	log := p.log().With(zap.String("projectId", proj.ID), zap.String("path", rest))
	if !p.Relay && strings.HasPrefix(rest, internalapi.PodWebhook+"/") {
		if rest == healthPath && req.Method == http.MethodGet {
			if f, ok := p.Runtime.(Finder); ok {
				return p.health(c, log, f, proj, rest, rawRest)
			}
		} else if err := p.check(c, proj.ID, rest); err != nil {
			return err // before routing: nothing starts for it
		}
	}

	ep, err := p.Runtime.Ensure(req.Context(), proj)
	if err != nil {
		return p.runtimeError(req.Context(), log, err)
	}
	if proxyErr := p.forward(c, log, proj, ep, rest, rawRest, nil); proxyErr != nil {
		return p.upstreamError(req.Context(), proxyErr.ctx, log, proxyErr.err)
	}
	return nil
}

// forwardError is a failed exchange with the agent (nothing was written).
type forwardError struct {
	ctx context.Context // the exchange's, bounded by Timeout
	err error
}

// forward sends the request to ep and streams the answer back; answer, when
// set, may refuse the agent's answer before anything of it is written (its
// error is the forwardError's).
func (p *Proxy) forward(c echo.Context, log *zap.Logger, proj store.Project, ep runtimes.Endpoint, rest, rawRest string,
	answer func(*http.Response) error) *forwardError {
	req := c.Request()
	if ep.Hold != nil {
		defer ep.Hold()()
	}

	timeout := p.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(req.Context(), timeout)
	defer cancel()

	transport := ep.Transport
	if transport == nil {
		transport = p.Transport
	}
	if transport == nil {
		transport = http.DefaultTransport
	}
	var proxyErr error
	rp := &httputil.ReverseProxy{
		Transport:     onceTransport{transport},
		FlushInterval: -1, // stream: flush after every write
		Rewrite: func(pr *httputil.ProxyRequest) {
			out := pr.Out
			out.URL.Scheme, out.URL.Host = ep.URL.Scheme, ep.URL.Host
			out.URL.Path = singleJoin(ep.URL.Path, rest)
			out.URL.RawPath = ""
			if ep.URL.RawPath != "" || rawRest != rest {
				out.URL.RawPath = singleJoin(ep.URL.EscapedPath(), rawRest)
			}
			out.URL.RawQuery = pr.In.URL.RawQuery
			out.Host = ep.URL.Host
			out.Header.Set("Authorization", "Bearer "+ep.Token)
			// The caller's 100-continue was answered by this server when the
			// body was first read; the agent must not send one of its own
			// (see informational).
			out.Header.Del("Expect")
			if id := c.Response().Header().Get(echo.HeaderXRequestID); id != "" {
				out.Header.Set(echo.HeaderXRequestID, id)
			}
			if p.Relay {
				for _, h := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
					if v := pr.In.Header.Values(h); len(v) > 0 {
						out.Header[h] = v
					}
				}
			} else {
				pr.SetXForwarded()
			}
		},
		ModifyResponse: func(res *http.Response) error {
			if answer != nil {
				if err := answer(res); err != nil {
					return err
				}
			}
			// The API's request id is the one the caller sees.
			res.Header.Del(echo.HeaderXRequestID)
			if res.StatusCode == http.StatusAccepted && req.Method == http.MethodPost && rest == incomingPath &&
				p.Accepted != nil && !p.Relay {
				p.recordAccepted(ctx, log, proj.ID, res)
			}
			return nil
		},
		ErrorHandler: func(_ http.ResponseWriter, _ *http.Request, err error) { proxyErr = err },
		ErrorLog:     zap.NewStdLog(log),
	}
	rp.ServeHTTP(informational{c.Response()}, req.WithContext(ctx))
	if proxyErr != nil {
		return &forwardError{ctx: ctx, err: proxyErr}
	}
	return nil
}

// incomingPath is the agent path of the webhook channel's messages.
const incomingPath = "/agent/channels/webhook/incoming"

// recordAccepted reads the correlationId of an async acceptance (the body
// is put back unchanged) and records it.
func (p *Proxy) recordAccepted(ctx context.Context, log *zap.Logger, projectID string, res *http.Response) {
	body, err := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	_ = res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(body))
	var acc wire.WebhookAccepted
	if err == nil {
		err = json.Unmarshal(body, &acc)
	}
	if err == nil && acc.CorrelationID == "" {
		err = errors.New("no correlationId in the 202")
	}
	if err == nil {
		err = p.Accepted(context.WithoutCancel(ctx), projectID, acc.CorrelationID)
	}
	if err != nil {
		log.Error("recording an accepted async message failed; only the pod's journal holds it",
			zap.String("correlationId", acc.CorrelationID), zap.Error(err))
	}
}

// informational passes 1xx answers the reverse proxy relays (100 Continue,
// 103 Early Hints) to the connection without committing echo's response:
// echo takes any WriteHeader as final, so the agent's real status (a 400,
// 413 or 504) would otherwise reach the caller as 200.
type informational struct{ *echo.Response }

func (w informational) WriteHeader(code int) {
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols && !w.Committed {
		w.Response.Writer.WriteHeader(code)
		return
	}
	w.Response.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach echo's writer (flushes).
func (w informational) Unwrap() http.ResponseWriter { return w.Response }

// onceTransport makes sure the round tripper below never replays a request:
// net/http retries a request on a broken keep-alive connection when it thinks
// the request is replayable (no body and an idempotent method or an
// Idempotency-Key header). For a non-idempotent method the proxy gives the
// request a body that cannot be rewound, which turns that off.
type onceTransport struct{ rt http.RoundTripper }

func (t onceTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if idempotent(r.Method) {
		return t.rt.RoundTrip(r)
	}
	r = r.WithContext(r.Context()) // a shallow copy: a RoundTripper must not modify its request
	if r.Body == nil || r.Body == http.NoBody {
		r.Body, r.ContentLength = io.NopCloser(strings.NewReader("")), 0
	}
	r.GetBody = nil
	return t.rt.RoundTrip(r)
}

func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// agentPath returns the path after marker ("/agent-proxy/" or "/relay/"),
// decoded and as sent.
func agentPath(u *url.URL, marker string) (rest, rawRest string, ok bool) {
	raw := u.EscapedPath()
	i := strings.Index(raw, marker)
	if i < 0 {
		return "", "", false
	}
	rawRest = raw[i+len(marker)-1:]
	rest, err := url.PathUnescape(rawRest)
	if err != nil {
		return "", "", false
	}
	// No dot segments or doubled slashes: what is checked is what is sent.
	if path.Clean(rest) != strings.TrimSuffix(rest, "/") && path.Clean(rest) != rest {
		return "", "", false
	}
	return rest, rawRest, true
}

func (p *Proxy) allowed(rest string) bool {
	prefixes := p.Prefixes
	if prefixes == nil {
		prefixes = DefaultPrefixes
	}
	for _, pre := range prefixes {
		dir := strings.HasSuffix(pre, "/")
		if (!dir && rest == pre) || (dir && strings.HasPrefix(rest, pre) && len(rest) > len(pre)) {
			return true
		}
	}
	return false
}

func singleJoin(base, rest string) string {
	return strings.TrimSuffix(base, "/") + rest
}

func (p *Proxy) runtimeError(reqCtx context.Context, log *zap.Logger, err error) error {
	var se *runtimes.StartError
	switch {
	case errors.As(err, &se):
		msg := "The project's agent failed to start. Retry later."
		if se.Reason != "" {
			msg = "The project's agent failed to start (" + se.Reason + "). Retry later."
		}
		e := wire.Coded("agent_start_failed", msg)
		secs := int((se.RetryAfter + time.Second - 1) / time.Second)
		e.Headers = map[string]string{"Retry-After": strconv.Itoa(max(secs, 1))}
		e.Cause = err
		return e
	case errors.Is(err, runtimes.ErrOffline):
		return InstanceOffline()
	case reqCtx.Err() != nil:
		return clientGone(reqCtx)
	}
	return wire.Internal(err)
}

// InstanceOffline is spec 7.2's 503 for a project pinned to a paired machine
// that is not connected.
func InstanceOffline() *wire.Error {
	return wire.Coded("instance_offline",
		"The project is pinned to a paired machine that is not connected.")
}

func (p *Proxy) upstreamError(reqCtx, ctx context.Context, log *zap.Logger, err error) error {
	switch {
	case reqCtx.Err() != nil:
		return clientGone(reqCtx)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		log.Warn("agent did not answer in time", zap.Error(err))
		return wire.Coded("agent_timeout", "The agent did not answer in time.")
	case errors.Is(err, runtimes.ErrOffline):
		return InstanceOffline()
	}
	e := wire.Coded("agent_unreachable", "The project's agent could not be reached.")
	e.Cause = err
	return e
}

// clientGone: the caller went away; nothing useful can be sent.
func clientGone(ctx context.Context) error {
	return wire.Coded("client_closed_request", context.Cause(ctx).Error())
}

func (p *Proxy) log() *zap.Logger {
	if p.Log == nil {
		return zap.NewNop()
	}
	return p.Log
}
