package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/webhooklog"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/wire"
)

// The channel page's delivery log (docs/webhook-delivery.md):
// every callback attempt by message with its final state, a replay button
// for delivered and outboxed replies, a banner per failing endpoint with a
// test message that re-enables it, and the rotation overlap.

// deliveriesPerPage is how many attempts one page of the log shows.
const deliveriesPerPage = 50

// Overlaps a rotation may keep the old secret for (Svix keeps it 24 h).
var overlaps = map[string]time.Duration{"": 24 * time.Hour, "0": 0, "24h": 24 * time.Hour, "168h": 7 * 24 * time.Hour}

func parseOverlap(v string) (time.Duration, error) {
	d, ok := overlaps[v]
	if !ok {
		return 0, errors.New("the overlap must be none, 24 hours or 7 days")
	}
	return d, nil
}

func (c *Console) deliveries(ctx context.Context, ec echo.Context, projectID string, d *channelData) error {
	if c.o.Webhooks == nil {
		return nil
	}
	page, err := c.o.Webhooks.List(ctx, projectID, "", ec.QueryParam("cursor"), deliveriesPerPage)
	if errors.Is(err, webhooklog.ErrBadCursor) {
		page, err = c.o.Webhooks.List(ctx, projectID, "", "", deliveriesPerPage)
	}
	if err != nil {
		return err
	}
	d.Deliveries, d.OlderCursor = webhooklog.Group(page.Attempts), page.NextCursor
	d.CanReplayRange = c.o.Recovery != nil
	failing, err := c.o.Webhooks.Store.ListWebhookEndpoints(ctx, projectID, true)
	if err != nil {
		return err
	}
	for _, e := range failing {
		d.Failing = append(d.Failing, webhooklog.EndpointHealth(e))
	}
	return nil
}

// ReplayMessage is POST …/channel/replay/{correlationId}: a member re-sends
// a delivered or outboxed reply (one attempt, the same webhook-id).
func (c *Console) ReplayMessage(ec echo.Context) error {
	return c.sendOnce(ec, func(ctx context.Context, proj store.Project, ch store.Channel) (wire.WebhookAttempt, error) {
		return c.o.Webhooks.Replay(ctx, c.podFor(proj), proj.ID, ch, ec.Param("correlationId"))
	})
}

// ReplayRange is POST …/channel/replay-range (since, until: UTC
// datetime-local values, each optional; status): a member replays every
// reply of the range with that final state (docs/webhook-delivery.md
// "Recovery"); the page says how many.
func (c *Console) ReplayRange(ec echo.Context) error {
	proj := projectFrom(ec)
	if c.o.Recovery == nil {
		return c.channelPage(ec, http.StatusServiceUnavailable, "", "", "Replays are not available on this server.")
	}
	var rr wire.WebhookReplayRange
	for _, f := range []struct {
		name string
		to   *time.Time
	}{{"since", &rr.Since}, {"until", &rr.Until}} {
		v := strings.TrimSpace(ec.FormValue(f.name))
		if v == "" {
			continue
		}
		t, err := time.ParseInLocation("2006-01-02T15:04", v, time.UTC)
		if err != nil {
			return c.channelPage(ec, http.StatusBadRequest, "", "", "Times are UTC, as 2026-03-01T12:00.")
		}
		*f.to = t
	}
	rr.Status = ec.FormValue("status")
	ctx := ec.Request().Context()
	ch, err := c.o.Store.GetChannel(ctx, proj.ID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && ch.Secret == "") {
		return c.channelPage(ec, http.StatusConflict, "", "", "The channel has no secret to sign with.")
	}
	if err != nil {
		return err
	}
	got, err := c.o.Recovery.Start(ctx, proj.ID, ch, rr)
	if err != nil {
		var we *wire.Error
		if errors.As(err, &we) && we.Status != 0 {
			return c.channelPage(ec, we.Status, "", "", "Not replayed: "+we.Message)
		}
		return err
	}
	flash := fmt.Sprintf("Replaying %d messages", got.Messages)
	if got.Skipped > 0 {
		flash += fmt.Sprintf(" (%d skipped: the log no longer knows their callback URL)", got.Skipped)
	}
	flash += "; their attempts appear below as they are sent."
	if got.Truncated {
		flash += " The range holds more: replay again from " + got.Last.Format("2006-01-02T15:04") + "."
	}
	return c.channelPage(ec, http.StatusAccepted, "", flash, "")
}

// TestEndpoint is POST …/channel/endpoint-test (url): a test message to a
// callback endpoint; a 2xx re-enables a failing one.
func (c *Console) TestEndpoint(ec echo.Context) error {
	return c.sendOnce(ec, func(ctx context.Context, proj store.Project, ch store.Channel) (wire.WebhookAttempt, error) {
		url := strings.TrimSpace(ec.FormValue("url"))
		// Only an endpoint the log knows with failures: the console does
		// not sign test messages to arbitrary URLs for members.
		known, err := c.o.Webhooks.Store.ListWebhookEndpoints(ctx, proj.ID, false)
		if err != nil {
			return wire.WebhookAttempt{}, err
		}
		found := false
		for _, e := range known {
			found = found || e.Endpoint == url
		}
		if !found {
			return wire.WebhookAttempt{}, wire.Coded("unknown_endpoint",
				"The test message goes only to an endpoint with failures in the log.")
		}
		return c.o.Webhooks.Test(ctx, c.podFor(proj), proj.ID, ch, url)
	})
}

// sendOnce runs one replay or test for a member of the workspace and shows
// the page with its attempt.
func (c *Console) sendOnce(ec echo.Context, send func(ctx context.Context, proj store.Project, ch store.Channel) (wire.WebhookAttempt, error)) error {
	proj := projectFrom(ec)
	if c.o.Webhooks == nil {
		return c.channelPage(ec, http.StatusServiceUnavailable, "", "", "The delivery log is not available on this server.")
	}
	ctx := ec.Request().Context()
	ch, err := c.o.Store.GetChannel(ctx, proj.ID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && ch.Secret == "") {
		return c.channelPage(ec, http.StatusConflict, "", "", "The channel has no secret to sign with.")
	}
	if err != nil {
		return err
	}
	a, err := send(ctx, proj, ch)
	if err != nil {
		var we *wire.Error
		status := http.StatusBadGateway
		if errors.As(err, &we) && we.Status != 0 {
			status = we.Status
		}
		return c.channelPage(ec, status, "", "", "Not sent: "+agentError(err))
	}
	flash := fmt.Sprintf("Sent: %s answered %d in %d ms.", a.URL, a.Status, a.LatencyMS)
	if a.Outcome != wire.AttemptDelivered {
		flash = fmt.Sprintf("Sent to %s, which did not accept it: %s", a.URL, attemptText(a))
	}
	return c.channelPage(ec, http.StatusOK, "", flash, "")
}

// attemptText is an attempt's answer in a few words.
func attemptText(a wire.WebhookAttempt) string {
	switch {
	case a.Error != "":
		return a.Error
	case a.Status != 0:
		return fmt.Sprintf("HTTP %d", a.Status)
	}
	return a.Outcome
}

// podFor reaches the project's agent when a replay or test needs it.
func (c *Console) podFor(proj store.Project) webhooklog.GetPod {
	return func(ctx context.Context) (*internalapi.PodClient, error) {
		return c.pod(ctx, proj, webhooklog.PodTimeout)
	}
}
