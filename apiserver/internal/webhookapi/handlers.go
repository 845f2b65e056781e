// Package webhookapi serves the member-facing webhook routes of a project's
// channel (spec 2.5, 4.2; docs/webhook-delivery.md) under
// /api/projects/{id}/agent-proxy/agent/channels/webhook: the outbox
// long-poll, the attempt log, endpoint health, replay and test messages.
// It is the HTTP edge over the domain packages outbox and webhooklog, which
// know nothing of HTTP: it authenticates the channel secret, reads the
// request, calls them, and answers.
package webhookapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/apiserver/internal/httpmw"
	"github.com/svc-dev/svc/apiserver/internal/outbox"
	"github.com/svc-dev/svc/apiserver/internal/runtimes"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/webhookchannel"
	"github.com/svc-dev/svc/apiserver/internal/webhooklog"
	"github.com/svc-dev/svc/apiserver/internal/webhookqueue"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/wire"
)

// PodFunc returns the typed client of a project's pod (starting it when
// needed), as the agent-proxy reaches it.
type PodFunc func(ctx context.Context, proj store.Project) (*internalapi.PodClient, error)

// Handlers are the routes. Channels reads the channel whose secret every
// route checks; Pod is nil when no runtime is configured (replay and test
// then answer 503).
type Handlers struct {
	Outbox   *outbox.Outbox
	Log      *webhooklog.Log
	Channels ChannelStore
	Pod      PodFunc
	// Recovery runs range replays (nil: 503).
	Recovery *webhookqueue.Recovery
}

// ChannelStore reads a project's channel (store.Store).
type ChannelStore interface {
	GetChannel(ctx context.Context, projectID string) (store.Channel, error)
}

// List is GET …/webhook/attempts.
func (h *Handlers) List(c echo.Context) error {
	proj := httpmw.ProjectFrom(c)
	if _, err := webhookchannel.Authenticate(c.Request().Context(), h.Channels, proj.ID, c.Request().Header.Get(wire.HeaderWebhookSecret)); err != nil {
		return err
	}
	limit, err := webhooklog.ParseLimit(c.QueryParam("limit"))
	if err != nil {
		return wire.Coded(wire.CodeInvalidLimit, err.Error()+".")
	}
	p, err := h.Log.List(c.Request().Context(), proj.ID, c.QueryParam("correlationId"), c.QueryParam("cursor"), limit)
	if errors.Is(err, webhooklog.ErrBadCursor) {
		return wire.Coded(wire.CodeInvalidCursor, err.Error()+".")
	}
	if err != nil {
		return wire.Unavailable(err)
	}
	return c.JSON(http.StatusOK, wire.WebhookAttemptList{Attempts: p.Attempts, NextCursor: p.NextCursor})
}

// Endpoints is GET …/webhook/endpoints: endpoints with failures.
func (h *Handlers) Endpoints(c echo.Context) error {
	proj := httpmw.ProjectFrom(c)
	if _, err := webhookchannel.Authenticate(c.Request().Context(), h.Channels, proj.ID, c.Request().Header.Get(wire.HeaderWebhookSecret)); err != nil {
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
		out.Endpoints = append(out.Endpoints, webhooklog.EndpointHealth(r))
	}
	return c.JSON(http.StatusOK, out)
}

// Replay is POST …/webhook/replay/:correlationId.
func (h *Handlers) Replay(c echo.Context) error {
	proj := httpmw.ProjectFrom(c)
	ch, err := webhookchannel.Authenticate(c.Request().Context(), h.Channels, proj.ID, c.Request().Header.Get(wire.HeaderWebhookSecret))
	if err != nil {
		return err
	}
	a, err := h.Log.Replay(c.Request().Context(), h.getPod(proj), proj.ID, ch, c.Param("correlationId"))
	if err != nil {
		return podError(err)
	}
	return c.JSON(http.StatusOK, a)
}

// ReplayRange is POST /api/projects/{id}/channels/webhook/replay {since,
// until, status}: every matching reply gets one attempt, sent by the API
// in the background, throttled; 202 with how many.
func (h *Handlers) ReplayRange(c echo.Context) error {
	proj := httpmw.ProjectFrom(c)
	ch, err := webhookchannel.Authenticate(c.Request().Context(), h.Channels, proj.ID, c.Request().Header.Get(wire.HeaderWebhookSecret))
	if err != nil {
		return err
	}
	if h.Recovery == nil {
		return wire.Coded(wire.CodeAgentUnavailable, "Replays are not available on this server.")
	}
	var in wire.WebhookReplayRange
	if err := json.NewDecoder(io.LimitReader(c.Request().Body, 64<<10)).Decode(&in); err != nil && !errors.Is(err, io.EOF) {
		return wire.Coded(wire.CodeInvalidReplayRange,
			`The body must be {"since": RFC 3339 time, "until": RFC 3339 time, "status": "delivered"|"in_outbox"|"taken_from_outbox"}, each optional.`)
	}
	out, err := h.Recovery.Start(c.Request().Context(), proj.ID, ch, in)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, out)
}

// Test is POST …/webhook/endpoints/test {callbackUrl}.
func (h *Handlers) Test(c echo.Context) error {
	proj := httpmw.ProjectFrom(c)
	ch, err := webhookchannel.Authenticate(c.Request().Context(), h.Channels, proj.ID, c.Request().Header.Get(wire.HeaderWebhookSecret))
	if err != nil {
		return err
	}
	var in wire.WebhookTestCallback
	if err := json.NewDecoder(io.LimitReader(c.Request().Body, 64<<10)).Decode(&in); err != nil || in.CallbackURL == "" {
		return wire.Coded(wire.CodeInvalidBody, "The body must be {\"callbackUrl\": \"https://…\"}.")
	}
	a, err := h.Log.Test(c.Request().Context(), h.getPod(proj), proj.ID, ch, in.CallbackURL)
	if err != nil {
		return podError(err)
	}
	return c.JSON(http.StatusOK, a)
}

func (h *Handlers) getPod(proj store.Project) webhooklog.GetPod {
	return func(ctx context.Context) (*internalapi.PodClient, error) {
		if h.Pod == nil {
			return nil, wire.Coded(wire.CodeAgentUnavailable,
				"No runtime is configured on this server, so nothing can be sent.")
		}
		pod, err := h.Pod(ctx, proj)
		if err != nil {
			e := wire.Coded(wire.CodeAgentUnavailable,
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
func PodFromRuntime(drv runtimes.Driver, tr http.RoundTripper) PodFunc {
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
			Timeout: webhooklog.PodTimeout}, nil
	}
}
