package webhooklog

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/apiserver/internal/httpmw"
	"github.com/svc-dev/svc/apiserver/internal/outboxapi"
	"github.com/svc-dev/svc/apiserver/internal/runtime"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/wire"
)

// Bounds of the pod's POST.
const (
	MaxBodyBytes       = 4 << 20
	MaxAttemptsPerPost = 500
)

// PodFunc returns the typed client of a project's pod (starting it when
// needed), as the agent-proxy reaches it.
type PodFunc func(ctx context.Context, proj store.Project) (*internalapi.PodClient, error)

// Handlers are the routes; Pod is nil when no runtime is configured (replay
// and test then answer 503).
type Handlers struct {
	Log *Log
	Pod PodFunc
}

// Put is POST /internal/projects/:id/webhook/attempts.
func (h *Handlers) Put(c echo.Context) error {
	projectID := c.Param("id")
	if p := httpmw.PrincipalFrom(c); !p.Runtime() || p.ProjectID != projectID {
		return wire.Coded("runtime_token_required", "Only the project's own runtime may record its callback attempts.")
	}
	body, err := io.ReadAll(io.LimitReader(c.Request().Body, MaxBodyBytes+1))
	if err != nil {
		return wire.Coded("invalid_body", "The body could not be read.")
	}
	if len(body) > MaxBodyBytes {
		return wire.Coded("request_too_large",
			"Too many attempt records in one request.")
	}
	var in wire.WebhookAttemptsPut
	if err := json.Unmarshal(body, &in); err != nil {
		return wire.Coded("invalid_body", "The body must be JSON attempt records: "+err.Error())
	}
	if err := validate(in.Attempts); err != nil {
		return wire.Coded("invalid_webhook_attempt", err.Error())
	}
	ctx := c.Request().Context()
	ch, err := h.Log.Store.GetChannel(ctx, projectID)
	if errors.Is(err, store.ErrNotFound) {
		return wire.Coded("channel_not_found", "No channel with this id on this project.")
	}
	if err != nil {
		return wire.Unavailable(err)
	}
	for _, a := range in.Attempts {
		if a.ChannelID != ch.ID {
			return wire.Coded("channel_not_found", "No channel with this id on this project.")
		}
	}
	n, err := h.Log.Record(ctx, projectID, in.Attempts)
	if err != nil {
		return wire.Unavailable(err)
	}
	return c.JSON(http.StatusOK, wire.WebhookAttemptsPutResponse{Stored: n})
}

// validate names every offending record.
func validate(as []wire.WebhookAttempt) error {
	if len(as) > MaxAttemptsPerPost {
		return errors.New("at most 500 attempts per request")
	}
	var bad []string
	for i, a := range as {
		var why []string
		if a.ID == "" || len(a.ID) > maxIDBytes {
			why = append(why, "id")
		}
		if a.CorrelationID == "" || len(a.CorrelationID) > maxIDBytes || len(a.WebhookID) > maxIDBytes {
			why = append(why, "correlationId/webhookId")
		}
		switch a.Kind {
		case wire.AttemptDelivery, wire.AttemptReplay, wire.AttemptTest:
		default:
			why = append(why, "kind")
		}
		switch a.Outcome {
		case wire.AttemptDelivered, wire.AttemptRetrying, wire.AttemptFailed:
		default:
			why = append(why, "outcome")
		}
		if a.AttemptedAt.IsZero() || a.Attempt < 1 {
			why = append(why, "attemptedAt/attempt")
		}
		if len(why) > 0 {
			bad = append(bad, "attempts["+itoa(i)+"]: "+strings.Join(why, ", "))
		}
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

func itoa(i int) string { return strconv.Itoa(i) }

// List is GET …/webhook/attempts.
func (h *Handlers) List(c echo.Context) error {
	proj := httpmw.ProjectFrom(c)
	if _, err := outboxapi.Authenticate(c, h.Log.Store, proj.ID); err != nil {
		return err
	}
	limit, err := ParseLimit(c.QueryParam("limit"))
	if err != nil {
		return wire.Coded("invalid_limit", err.Error()+".")
	}
	p, err := h.Log.List(c.Request().Context(), proj.ID, c.QueryParam("correlationId"), c.QueryParam("cursor"), limit)
	if errors.Is(err, ErrBadCursor) {
		return wire.Coded("invalid_cursor", err.Error()+".")
	}
	if err != nil {
		return wire.Unavailable(err)
	}
	return c.JSON(http.StatusOK, wire.WebhookAttemptList{Attempts: p.Attempts, NextCursor: p.NextCursor})
}

// Endpoints is GET …/webhook/endpoints: endpoints with failures.
func (h *Handlers) Endpoints(c echo.Context) error {
	proj := httpmw.ProjectFrom(c)
	if _, err := outboxapi.Authenticate(c, h.Log.Store, proj.ID); err != nil {
		return err
	}
	rows, err := h.Log.Store.ListWebhookEndpoints(c.Request().Context(), proj.ID, false)
	if err != nil {
		return wire.Unavailable(err)
	}
	out := struct {
		Endpoints []wire.WebhookEndpointHealth `json:"endpoints"`
	}{Endpoints: []wire.WebhookEndpointHealth{}}
	for _, r := range rows {
		out.Endpoints = append(out.Endpoints, EndpointHealth(r))
	}
	return c.JSON(http.StatusOK, out)
}

// EndpointHealth is the wire form of an endpoint row.
func EndpointHealth(r store.WebhookEndpoint) wire.WebhookEndpointHealth {
	e := wire.WebhookEndpointHealth{Endpoint: r.Endpoint, ConsecutiveFailures: r.ConsecutiveFailures,
		Failing: r.DisabledAt != nil, LastError: r.LastError, LastAttemptAt: r.LastAttemptAt.UTC()}
	if r.FailingSince != nil {
		e.FailingSince = r.FailingSince.UTC()
	}
	if r.DisabledAt != nil {
		e.DisabledAt = r.DisabledAt.UTC()
	}
	return e
}

// Replay is POST …/webhook/replay/:correlationId.
func (h *Handlers) Replay(c echo.Context) error {
	proj := httpmw.ProjectFrom(c)
	ch, err := outboxapi.Authenticate(c, h.Log.Store, proj.ID)
	if err != nil {
		return err
	}
	a, err := h.Log.Replay(c.Request().Context(), h.getPod(proj), proj.ID, ch, c.Param("correlationId"))
	if err != nil {
		return podError(err)
	}
	return c.JSON(http.StatusOK, a)
}

// Test is POST …/webhook/endpoints/test {callbackUrl}.
func (h *Handlers) Test(c echo.Context) error {
	proj := httpmw.ProjectFrom(c)
	ch, err := outboxapi.Authenticate(c, h.Log.Store, proj.ID)
	if err != nil {
		return err
	}
	var in wire.WebhookTestCallback
	if err := json.NewDecoder(io.LimitReader(c.Request().Body, 64<<10)).Decode(&in); err != nil || in.CallbackURL == "" {
		return wire.Coded("invalid_body", "The body must be {\"callbackUrl\": \"https://…\"}.")
	}
	a, err := h.Log.Test(c.Request().Context(), h.getPod(proj), proj.ID, ch, in.CallbackURL)
	if err != nil {
		return podError(err)
	}
	return c.JSON(http.StatusOK, a)
}

func (h *Handlers) getPod(proj store.Project) GetPod {
	return func(ctx context.Context) (*internalapi.PodClient, error) {
		if h.Pod == nil {
			return nil, wire.Coded("agent_unavailable",
				"No runtime is configured on this server, so nothing can be sent.")
		}
		pod, err := h.Pod(ctx, proj)
		if err != nil {
			e := wire.Coded("agent_unavailable",
				"The project's agent is not reachable; retry shortly.")
			e.Cause = err
			return nil, e
		}
		return pod, nil
	}
}

// podError passes the pod's coded error on (a 400 for a refused URL, say)
// and our own coded errors as they are.
func podError(err error) error {
	var we *wire.Error
	if errors.As(err, &we) {
		return we
	}
	if se, ok := internalapi.AsStatus(err); ok && se.Body.Error.Code != "" {
		return wire.Relayed(se.Status, wire.ErrorDetail{Type: se.Body.Error.Type, Code: se.Body.Error.Code, Message: se.Body.Error.Message})
	}
	return wire.Unavailable(err)
}

// PodFromRuntime reaches a project's pod through the runtime driver (its
// runtime token, and the tunnel's transport for a paired machine), as the
// agent-proxy does; tr carries requests to endpoints without a transport.
func PodFromRuntime(drv runtime.Driver, tr http.RoundTripper) PodFunc {
	if tr == nil {
		tr = http.DefaultTransport
	}
	return func(ctx context.Context, proj store.Project) (*internalapi.PodClient, error) {
		ep, err := drv.Ensure(ctx, proj)
		if err != nil {
			return nil, err
		}
		t := ep.Transport
		if t == nil {
			t = tr
		}
		return &internalapi.PodClient{BaseURL: ep.URL.String(), Token: ep.Token, HTTP: &http.Client{Transport: t},
			Timeout: PodTimeout}, nil
	}
}

// PodTimeout bounds a replay or test through the pod: one callback attempt
// (30 s by default) and a margin.
const PodTimeout = 45 * time.Second
