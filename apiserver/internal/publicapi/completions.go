package publicapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/apierr"
	"github.com/svc-dev/svc/apiserver/internal/auth"
	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/httpmw"
	"github.com/svc-dev/svc/apiserver/internal/metering"
	"github.com/svc-dev/svc/apiserver/internal/upstream"
)

// upstreamDeadline bounds a whole upstream exchange, including the drain that
// keeps reading after a client went away (so its usage is still metered).
const upstreamDeadline = 10 * time.Minute

// maxUpstreamBody bounds a non-streamed upstream answer.
const maxUpstreamBody = 32 << 20

func principal(c echo.Context) auth.Principal { return httpmw.PrincipalFrom(c) }

// ChatCompletions answers POST /chat/completions: auth (middleware) → model →
// tier → rate limit → usage windows → upstream (issue order; spec 7.1).
func (a *API) ChatCompletions(c echo.Context) error {
	t := timingOf(c)
	t.authDone()
	p := principal(c)
	maxBody := a.MaxBody
	if maxBody <= 0 {
		maxBody = DefaultMaxBody
	}
	req, err := parseChatRequest(c.Request(), maxBody)
	if err != nil {
		return err
	}
	model, ok := a.Catalog.Resolve(req.Model)
	if !ok {
		return apierr.ModelNotFound(req.Model)
	}
	plan, ok := a.Catalog.Plan(p.Plan)
	if !ok {
		return apierr.PlanNotFound(p.Plan)
	}
	if !plan.AllowsTier(model.Tier) {
		return apierr.ModelTierRestricted(model.ID, model.Tier)
	}
	admitStart := time.Now()
	actx, span := a.Tracer.Start(c.Request().Context(), "admit")
	adm, err := a.Meter.Admit(actx, p, plan)
	span.End()
	t.admit = time.Since(admitStart)
	if err != nil {
		return err
	}
	for k, v := range adm.Headers() {
		c.Response().Header().Set(k, v)
	}

	// The upstream exchange outlives a client that hangs up: its usage is
	// still reported at the end and must be metered.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request().Context()), upstreamDeadline)
	defer cancel()
	started := time.Now()
	ans, err := a.Router.Send(ctx, model, func(d catalog.Deployment) ([]byte, error) {
		return req.upstreamBody(model, d.UpstreamModel)
	})
	t.upstream += ans.Wait
	if err != nil {
		a.Metrics.upstreamError(model.ID)
		switch {
		case errors.Is(err, upstream.ErrTimeout):
			return &apierr.Error{Code: "upstream_timeout",
				Message: "The model provider did not answer in time.", Cause: err}
		case errors.Is(err, upstream.ErrNoDeployment):
			return &apierr.Error{Code: "upstream_cooling_down",
				Message: "Every provider of this model is cooling down after errors; retry shortly.", Cause: err}
		case errors.Is(err, upstream.ErrUnavailable):
			return &apierr.Error{Code: "upstream_unavailable",
				Message: "The model provider could not be reached.", Cause: err}
		}
		return apierr.Internal(err)
	}
	resp := ans.Resp
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		a.Metrics.upstreamError(model.ID)
		return upstreamStatusError(resp)
	}
	if v := resp.Header.Get("X-Svc-Upstream"); v != "" {
		c.Response().Header().Set("X-Svc-Upstream", v)
	}

	requestID := c.Response().Header().Get(echo.HeaderXRequestID)
	// meter records the request's usage, to the deployment that answered;
	// the duration is observed by the caller before the last byte reaches
	// the client.
	meter := func(u *metering.Usage, streamed bool) {
		if u == nil {
			return
		}
		u.Deployment = ans.Name
		mctx, mcancel := context.WithTimeout(ctx, 10*time.Second)
		defer mcancel()
		mctx, span := a.Tracer.Start(mctx, "meter")
		defer span.End()
		if err := a.Meter.Record(mctx, p, plan, model, requestID, *u, streamed); err != nil {
			a.Log.Error("recording usage failed", zap.String("workspace_id", p.WorkspaceID),
				zap.String("request_id", requestID), zap.Error(err))
		}
	}
	if req.Stream {
		_, span := a.Tracer.Start(ctx, "stream")
		u := a.stream(c, resp.Body, model, req.IncludeUsage, func() { a.Metrics.observe(model.ID, true, time.Since(started)) })
		span.End()
		meter(u, true)
		return nil
	}
	return a.plain(c, resp, model, t, func() { a.Metrics.observe(model.ID, false, time.Since(started)) }, meter)
}

// plain relays a non-streamed answer with the public model id.
func (a *API) plain(c echo.Context, resp *http.Response, model catalog.Model, t *timing, done func(), meter func(*metering.Usage, bool)) error {
	readStart := time.Now()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxUpstreamBody))
	t.upstream += time.Since(readStart)
	if err != nil {
		return &apierr.Error{Code: "upstream_error",
			Message: "The model provider's answer was cut off.", Cause: err}
	}
	if !gjson.ValidBytes(raw) || !gjson.ParseBytes(raw).IsObject() {
		return &apierr.Error{Code: "upstream_error",
			Message: "The model provider answered with invalid JSON."}
	}
	out, err := sjson.SetBytes(raw, "model", model.ID)
	if err != nil {
		return apierr.Internal(err)
	}
	u := usageOf(gjson.GetBytes(out, "usage"))
	done()
	c.Response().Header().Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	c.Response().Header().Set(echo.HeaderContentLength, strconv.Itoa(len(out)))
	c.Response().WriteHeader(http.StatusOK)
	_, _ = c.Response().Write(out)
	c.Response().Flush() // the client has its answer before metering runs
	meter(u, false)
	return nil
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
		e := apierr.New(http.StatusTooManyRequests, apierr.TypeRateLimit, "upstream_rate_limited",
			"The model provider is rate limiting requests; retry later.")
		ra := resp.Header.Get("Retry-After")
		if _, err := strconv.Atoi(ra); err != nil {
			ra = "1"
		}
		e.Headers = map[string]string{"Retry-After": ra}
		return e
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		return apierr.New(resp.StatusCode, apierr.TypeInvalidRequest, "upstream_rejected", msg)
	default:
		return &apierr.Error{Code: "upstream_error",
			Message: "The model provider failed to answer.", Cause: fmt.Errorf("upstream status %d: %s", resp.StatusCode, msg)}
	}
}

// usageOf reads an OpenAI usage object; nil when absent or null.
func usageOf(u gjson.Result) *metering.Usage {
	if !u.IsObject() {
		return nil
	}
	return &metering.Usage{PromptTokens: u.Get("prompt_tokens").Int(), CompletionTokens: u.Get("completion_tokens").Int(),
		ReasoningTokens: u.Get("completion_tokens_details.reasoning_tokens").Int()}
}
