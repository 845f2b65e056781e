package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/apierr"
	"github.com/svc-dev/svc/apiserver/internal/auth"
	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/httpmw"
	"github.com/svc-dev/svc/apiserver/internal/metering"
	"github.com/svc-dev/svc/apiserver/internal/upstream"
	"github.com/svc-dev/svc/shared/wire"
)

// upstreamDeadline bounds a whole upstream exchange, including the drain that
// keeps reading after a client went away (so its usage is still metered).
const upstreamDeadline = 10 * time.Minute

// maxUpstreamBody bounds a non-streamed upstream answer.
const maxUpstreamBody = 32 << 20

func principal(c echo.Context) auth.Principal { return httpmw.PrincipalFrom(c) }

// ChatCompletions answers POST /chat/completions in the OpenAI
// chat-completions wire format (chatCodec); see complete.
func (a *API) ChatCompletions(c echo.Context) error { return a.complete(c, chatCodec{}) }

// complete is the one completion pipeline behind every wire format: auth
// (middleware) → decode (the codec) → model → tier → rate limit → usage
// windows → upstream (fallbacks, key pools) → answer or stream (the codec)
// → meter (issue order; spec 7.1). The codec only translates between its
// wire format and the internal chat-completions form.
//
// Each phase is its own function and the handler's own frame is small, so a
// long stream is relayed from a shallower stack (the runtime shrinks a
// goroutine's stack only while less than a quarter of it is in use; see
// docs/performance.md).
func (a *API) complete(c echo.Context, cd codec) error {
	// The upstream exchange outlives a client that hangs up: its usage is
	// still reported at the end and must be metered.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request().Context()), upstreamDeadline)
	x, err := a.admit(c, cd)
	if err != nil {
		cancel()
		return err
	}
	if x.req.passthrough {
		ctx = upstream.WithEndpoint(ctx, "/responses")
	}
	x.ctx = ctx
	resp, err := a.send(c, x)
	if err != nil {
		a.settle(x, nil)
		cancel()
		return err
	}
	if x.req.Stream && a.detach(c, x, resp, cancel) {
		return nil // relayed, metered and ended on a goroutine of its own
	}
	defer cancel()
	defer resp.Body.Close()
	if x.req.Stream {
		_, span := a.Tracer.Start(ctx, "stream")
		u := a.streamWith(c, resp.Body, x.codec.stream(x), func() { x.observe(a) })
		span.End()
		a.meter(x, u, true)
		return nil
	}
	if err := a.plain(c, resp, x); err != nil {
		a.settle(x, nil)
		return err
	}
	return nil
}

// exchange is one completion's state across the handler's phases.
type exchange struct {
	t          *timing
	p          auth.Principal
	codec      codec
	req        *chatRequest
	model      catalog.Model
	plan       catalog.Plan
	ctx        context.Context // the upstream exchange's (outlives the client)
	started    time.Time
	deployment string // the deployment that answered
	// responseModel is the upstream model that answered (the
	// deployment's, for the gen_ai.response.model attribute).
	responseModel string
	upstream0     string // the first deployment's upstream model
	body0         []byte // the upstream body for upstream0
	requestID     string
	adm           metering.Admission
	settled       bool // the key-budget reservation was settled
	// The rate-limit headers of an admitted request, set while the
	// upstream works on its answer (Written).
	headers    http.Header
	admittedAt time.Time
	anthropic  bool
	headersSet bool
}

// observe records the request's duration, before the last byte reaches the
// client.
func (x *exchange) observe(a *API) {
	a.Metrics.observe(x.model.ID, x.req.Stream, time.Since(x.started))
}

// admit authenticates (the middleware's principal), parses the request,
// resolves its model and plan, and applies the rate limits and usage
// windows.
func (a *API) admit(c echo.Context, cd codec) (*exchange, error) {
	x := &exchange{t: timingOf(c), p: principal(c), codec: cd}
	x.t.authDone()
	maxBody := a.MaxBody
	if maxBody <= 0 {
		maxBody = DefaultMaxBody
	}
	req, err := cd.decode(c.Request(), maxBody)
	if err != nil {
		return nil, err
	}
	x.req = req
	model, ok := a.Catalog.Resolve(req.Model)
	if !ok {
		return nil, apierr.ModelNotFound(req.Model)
	}
	plan, ok := a.Catalog.Plan(x.p.Plan)
	if !ok {
		return nil, apierr.PlanNotFound(x.p.Plan)
	}
	if !plan.AllowsTier(model.Tier) {
		return nil, apierr.ModelTierRestricted(model.ID, model.Tier)
	}
	x.model, x.plan = model, plan
	if req.responses != nil && a.Catalog.ResponsesNative(&model) {
		// A Responses-native provider gets the client's request as it is.
		x.codec, req.body, req.passthrough = responsesNativeCodec{}, req.clientBody, true
	}
	// The first deployment's upstream body, built here rather than inside
	// the router's call chain (whose deepest point then stays shallower).
	if len(model.Deployments) > 0 {
		x.upstream0 = model.Deployments[0].UpstreamModel
		if x.body0, err = req.upstreamBody(model, x.upstream0); err != nil {
			return nil, err
		}
	}
	admitStart := time.Now()
	actx, span := a.Tracer.Start(c.Request().Context(), "admit")
	adm, err := a.Meter.Admit(actx, x.p, plan)
	span.End()
	x.t.admit = time.Since(admitStart)
	_, anthropic := cd.(messagesCodec)
	if err != nil {
		setRateLimitHeaders(c.Response().Header(), adm, model, anthropic, true, time.Now())
		return nil, err
	}
	x.adm = adm
	x.headers, x.admittedAt, x.anthropic = c.Response().Header(), time.Now(), anthropic
	return x, nil
}

// Written sets an admitted request's rate-limit headers, once: the
// upstream client calls it when the request is written to a plain-HTTP
// upstream, so that this runs while the upstream works on the answer; send
// calls it after the exchange too (the other transports).
func (x *exchange) Written() {
	if !x.headersSet {
		x.headersSet = true
		setRateLimitHeaders(x.headers, x.adm, x.model, x.anthropic, false, x.admittedAt)
	}
}

// send asks the model's deployments (fallbacks, retries) and returns a 200
// answer; the caller closes its body.
func (a *API) send(c echo.Context, x *exchange) (*http.Response, error) {
	x.started = time.Now()
	ans, err := a.Router.Send(upstream.WithWritten(x.ctx, x), &x.model, func(d *catalog.Deployment) ([]byte, error) {
		if x.body0 != nil && d.UpstreamModel == x.upstream0 {
			return x.body0, nil
		}
		return x.req.upstreamBody(x.model, d.UpstreamModel)
	})
	x.t.upstream += ans.Wait
	x.Written() // when no request was written to a plain-HTTP upstream
	if err != nil {
		a.Metrics.upstreamError(x.model.ID)
		return nil, sendError(err)
	}
	resp := ans.Resp
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		a.Metrics.upstreamError(x.model.ID)
		return nil, upstreamStatusError(resp)
	}
	if v := resp.Header.Get("X-Svc-Upstream"); v != "" {
		c.Response().Header().Set("X-Svc-Upstream", v)
	}
	x.deployment = ans.Name
	x.responseModel = ans.Name[strings.IndexByte(ans.Name, '/')+1:]
	x.requestID = c.Response().Header().Get(echo.HeaderXRequestID)
	// The request bodies are not needed past here (a stream may be open
	// for minutes).
	x.req.body, x.body0 = nil, nil
	return resp, nil
}

// sendError maps the router's failure to the client's error.
func sendError(err error) error {
	switch {
	case errors.Is(err, upstream.ErrTimeout):
		return &wire.Error{Code: "upstream_timeout",
			Message: "The model provider did not answer in time.", Cause: err}
	case errors.Is(err, upstream.ErrNoDeployment):
		return &wire.Error{Code: "upstream_cooling_down",
			Message: "Every provider of this model is cooling down after errors; retry shortly.", Cause: err}
	case errors.Is(err, upstream.ErrUnavailable):
		return &wire.Error{Code: "upstream_unavailable",
			Message: "The model provider could not be reached.", Cause: err}
	}
	return wire.Internal(err)
}

// meter records the request's usage, to the deployment that answered.
func (a *API) meter(x *exchange, u *metering.Usage, streamed bool) {
	if a.Tracer.On() {
		genAI(x, u)
	}
	a.settle(x, u)
	if u == nil {
		return
	}
	u.Deployment = x.deployment
	// A context of its own only when something uses it: the Recorder
	// queues without one, and a span exists only with tracing on.
	mctx := x.ctx
	if a.Meter.Recorder == nil { // written inline: bounded
		var mcancel context.CancelFunc
		mctx, mcancel = context.WithTimeout(mctx, 10*time.Second)
		defer mcancel()
	}
	if a.Tracer.On() {
		var span trace.Span
		mctx, span = a.Tracer.Start(mctx, "meter")
		defer span.End()
	}
	if err := a.Meter.Record(mctx, x.p, x.plan, x.model, x.requestID, *u, streamed); err != nil {
		a.Log.Error("recording usage failed", zap.String("workspace_id", x.p.WorkspaceID),
			zap.String("request_id", x.requestID), zap.Error(err))
	}
}

// settle ends the request's key-budget reservation, once: with its usage
// when metered, with none when it failed.
func (a *API) settle(x *exchange, u *metering.Usage) {
	if !x.adm.KeyBudget || x.settled {
		return
	}
	x.settled = true
	// The settlement's write, when it makes one, outlives the client
	// (bounded by metering.SettleTimeout).
	if err := a.Meter.SettleDetached(x.ctx, x.p, x.adm, x.model, u); err != nil {
		a.Log.Error("settling the key budget failed", zap.String("api_key_id", x.p.KeyID),
			zap.String("request_id", x.requestID), zap.Error(err))
	}
}

// plain relays a non-streamed answer with the public model id.
func (a *API) plain(c echo.Context, resp *http.Response, x *exchange) error {
	t := x.t
	readStart := time.Now()
	raw, err := readAnswer(resp)
	t.upstream += time.Since(readStart)
	if err != nil {
		return &wire.Error{Code: "upstream_error",
			Message: "The model provider's answer was cut off.", Cause: err}
	}
	if !gjson.ValidBytes(raw) || !isObject(raw) { // no gjson.ParseBytes: it copies the whole answer
		return &wire.Error{Code: "upstream_error",
			Message: "The model provider answered with invalid JSON."}
	}
	out, err := setTopString(raw, "model", x.model.ID, true, 0) // raw is this function's own
	if err != nil {
		return wire.Internal(err)
	}
	u := x.codec.usage(out)
	if out, err = x.codec.answer(x, out); err != nil {
		return err
	}
	x.observe(a)
	// The key budget is settled before the client has its answer: its next
	// request then finds the reservation gone.
	a.settle(x, u)
	c.Response().Header().Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	c.Response().Header().Set(echo.HeaderContentLength, strconv.Itoa(len(out)))
	c.Response().WriteHeader(http.StatusOK)
	_, _ = c.Response().Write(out)
	c.Response().Flush() // the client has its answer before metering runs
	a.meter(x, u, false)
	return nil
}

// readAnswer reads a non-streamed upstream answer of at most
// maxUpstreamBody bytes: at its declared length when it has one (one
// allocation, no growing buffer).
func readAnswer(resp *http.Response) ([]byte, error) {
	if n := resp.ContentLength; n >= 0 && n <= maxUpstreamBody {
		raw := make([]byte, n)
		if _, err := io.ReadFull(resp.Body, raw); err != nil {
			return nil, err
		}
		return raw, nil
	}
	return io.ReadAll(io.LimitReader(resp.Body, maxUpstreamBody))
}

// upstreamStatusError maps a non-200 upstream answer: its 4xx errors reach
// the client in our envelope (with the upstream's message), 429 keeps its
// Retry-After, 5xx becomes 502.
func upstreamStatusError(resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var env struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    any    `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(raw, &env)
	msg := env.Error.Message
	if msg == "" {
		msg = "The model provider rejected the request."
	}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		e := wire.Coded("upstream_rate_limited",
			"The model provider is rate limiting requests; retry later.")
		ra := resp.Header.Get("Retry-After")
		if _, err := strconv.Atoi(ra); err != nil {
			ra = "1"
		}
		e.Headers = map[string]string{"Retry-After": ra}
		return e
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		// The provider's own 4xx, relayed with its status.
		return wire.Relayed(resp.StatusCode, wire.ErrorDetail{Type: wire.TypeInvalidRequest, Code: "upstream_rejected", Message: msg})
	default:
		return &wire.Error{Code: "upstream_error",
			Message: "The model provider failed to answer.", Cause: fmt.Errorf("upstream status %d: %s", resp.StatusCode, msg)}
	}
}

// usageOf reads an OpenAI usage object; nil when absent or null.
func usageOf(u gjson.Result) *metering.Usage {
	if !u.IsObject() {
		return nil
	}
	// Each count as u.Get finds it: a top-level count at its key's first
	// occurrence; a detail in the first details object (of those with the
	// details key, in order) that has it.
	js := u.Raw
	var us metering.Usage
	var found [5]bool
	set := func(i int, dst *int64, raw string) {
		if !found[i] {
			found[i] = true
			*dst = intAt(raw)
		}
	}
	plain := true // no key written with escapes
	details := func(raw string, count func(key, raw string)) {
		if plain && len(raw) > 0 && raw[0] == '{' {
			plain = eachField(raw, func(key string, from, to int) bool {
				count(key, raw[from:to])
				return true
			})
		}
	}
	plain = eachField(js, func(key string, from, to int) bool {
		raw := js[from:to]
		switch key {
		case "prompt_tokens":
			set(0, &us.PromptTokens, raw)
		case "completion_tokens":
			set(1, &us.CompletionTokens, raw)
		case "completion_tokens_details":
			details(raw, func(key, raw string) {
				if key == "reasoning_tokens" {
					set(2, &us.ReasoningTokens, raw)
				}
			})
		case "prompt_tokens_details":
			details(raw, func(key, raw string) {
				switch key {
				case "cached_tokens":
					set(3, &us.CachedTokens, raw)
				case "cache_write_tokens":
					set(4, &us.CacheWriteTokens, raw)
				}
			})
		}
		return plain
	}) && plain
	if plain {
		return &us
	}
	// A key written with escapes: gjson unescapes keys.
	return &metering.Usage{PromptTokens: u.Get("prompt_tokens").Int(), CompletionTokens: u.Get("completion_tokens").Int(),
		ReasoningTokens:  u.Get("completion_tokens_details.reasoning_tokens").Int(),
		CachedTokens:     u.Get("prompt_tokens_details.cached_tokens").Int(),
		CacheWriteTokens: u.Get("prompt_tokens_details.cache_write_tokens").Int()}
}
