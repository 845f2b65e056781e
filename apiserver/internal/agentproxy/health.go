package agentproxy

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/runtimes"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/wire"
)

// Finder is the runtime lookup the channel's health needs: the project's
// agent if it is serving, never starting or waking it (runtimes.Router).
type Finder interface {
	Find(ctx context.Context, p store.Project) (runtimes.Found, error)
}

// defaultRetryAfter is told after a failed start when the driver gives no
// hint of its own.
const defaultRetryAfter = 5 * time.Second

// health is GET …/webhook/health (spec 2.5): always a 200 that reports.
// An agent that is serving answers it itself (connected, or why not: fenced,
// shutting down); otherwise the API answers connected:false with a reason
// (wire.HealthStopped, HealthStarting, HealthStartFailed with retryAfter,
// HealthOffline, HealthUnreachable). No health poll starts an agent or
// counts as a use that keeps one from its idle stop, so a monitoring system
// polling every project's health leaves idle agents stopped.
func (p *Proxy) health(c echo.Context, log *zap.Logger, f Finder, proj store.Project, rest, rawRest string) error {
	ctx := c.Request().Context()
	found, err := f.Find(ctx, proj)
	if err != nil {
		if ctx.Err() != nil {
			return clientGone(ctx)
		}
		return wire.Unavailable(err)
	}
	if found.Serving {
		found.Endpoint.Hold = nil // a health poll is not a use
		ferr := p.forward(c, log, proj, found.Endpoint, rest, rawRest, notServing)
		if ferr == nil {
			return nil
		}
		if ctx.Err() != nil {
			return clientGone(ctx)
		}
		log.Info("health: the agent did not answer", zap.Error(ferr.err))
		reason := wire.HealthUnreachable
		var ns errNotServing
		if errors.Is(ferr.err, runtimes.ErrOffline) || (errors.As(ferr.err, &ns) && ns.code == "instance_offline") {
			reason = wire.HealthOffline
		}
		return p.report(c, proj.ID, reason, 0)
	}
	switch found.Status.State {
	case runtimes.StateOffline:
		return p.report(c, proj.ID, wire.HealthOffline, 0)
	case runtimes.StateStarting, runtimes.StateRunning:
		return p.report(c, proj.ID, wire.HealthStarting, 0)
	case runtimes.StateFailed:
		ra := found.RetryAfter
		if ra <= 0 {
			ra = defaultRetryAfter
		}
		return p.report(c, proj.ID, wire.HealthStartFailed, ra)
	}
	return p.report(c, proj.ID, wire.HealthStopped, 0)
}

// errNotServing: the agent's side answered health with an error (a relay
// hop whose replica lost the machine's tunnel: 503 instance_offline).
type errNotServing struct{ code string }

func (e errNotServing) Error() string { return "health answered " + e.code }

// notServing refuses a health answer that is not a 200: the API reports
// instead.
func notServing(res *http.Response) error {
	if res.StatusCode == http.StatusOK {
		return nil
	}
	var body wire.ErrorBody
	_ = json.NewDecoder(io.LimitReader(res.Body, 64<<10)).Decode(&body)
	_ = res.Body.Close()
	return errNotServing{code: body.Error.Code}
}

// report is the API's own health answer for an agent that is not serving:
// hasSecret from the channel and outboxPending from the API's durable
// outbox; messageCount is the agent's counter and reads 0.
func (p *Proxy) report(c echo.Context, projectID, reason string, retryAfter time.Duration) error {
	h := wire.WebhookHealth{Connected: false, Reason: reason}
	if retryAfter > 0 {
		h.RetryAfter = int((retryAfter + time.Second - 1) / time.Second)
	}
	if p.Channels != nil {
		ch, err := p.Channels.GetChannel(c.Request().Context(), projectID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return wire.Unavailable(err)
		}
		h.HasSecret = ch.Secret != ""
	}
	if p.Pending != nil {
		if n, err := p.Pending(c.Request().Context(), projectID); err == nil {
			h.OutboxPending = int(n.Pending)
		}
	}
	return c.JSON(http.StatusOK, h)
}
