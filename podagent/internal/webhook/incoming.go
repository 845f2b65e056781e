package webhook

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/callback"
	"github.com/svc-dev/svc/podagent/internal/turn"
	"github.com/svc-dev/svc/shared/wire"
)

// Incoming is a parsed request body (spec 2.4); its Metadata is the
// caller's object, byte for byte (nil when absent).
type Incoming = wire.WebhookIncoming

// badRequest is wire.Coded for the 400s of a body (every code it is given
// is declared 400 in wire.Codes).
func badRequest(code, msg string) *wire.Error { return wire.Coded(code, msg) }

// ParseIncoming validates a body (wire.ParseWebhookIncoming: the API's
// agent-proxy checks the same before it routes; the pod checks again).
func ParseIncoming(body []byte) (Incoming, error) { return wire.ParseWebhookIncoming(body) }

func (h *Handler) readBody(c echo.Context) ([]byte, error) {
	r := c.Request()
	tooLarge := &wire.Error{Code: "request_too_large",
		Message: fmt.Sprintf("The body is larger than the limit of %d bytes.", h.d.MaxBodyBytes)}
	if r.ContentLength > h.d.MaxBodyBytes {
		return nil, tooLarge
	}
	b, err := io.ReadAll(http.MaxBytesReader(c.Response(), r.Body, h.d.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge
		}
		return nil, badRequest("invalid_body", "The body could not be read.")
	}
	return b, nil
}

func (h *Handler) incoming(c echo.Context) error {
	cfg, err := h.authenticate(c)
	if err != nil {
		return err
	}
	if h.msgs.Closing() {
		return errShuttingDown
	}
	if h.d.Ready != nil {
		if err := h.d.Ready(); err != nil {
			return &wire.Error{Code: "agent_not_ready",
				Message: "The agent is not ready to take messages; retry shortly.", Cause: err}
		}
	}
	body, err := h.readBody(c)
	if err != nil {
		return err
	}
	in, err := ParseIncoming(body)
	if err != nil {
		return err
	}
	if in.CallbackURL != "" {
		if err := h.d.Callbacks.CheckURL(in.CallbackURL); err != nil {
			code := "invalid_callback_url"
			if errors.Is(err, callback.ErrRefused) {
				code = "callback_url_refused"
			}
			return badRequest(code, "'callbackUrl' is not usable: "+err.Error()+".")
		}
	}
	h.messages.Add(1)
	if h.d.Journal != nil {
		if _, err := h.d.Journal.CountMessage(); err != nil {
			h.log.Warn("persisting messageCount failed", zap.Error(err))
		}
	}
	corr := newID("cor_")
	mode := "sync"
	if in.CallbackURL != "" {
		mode = "async"
	}
	actID := h.d.Activity.Add(wire.ActivityEvent{Direction: wire.DirectionInbound, CorrelationID: corr,
		SenderID: in.SenderID, SenderName: in.SenderName, Mode: mode, Preview: in.Message, Status: wire.ActivityProcessing})
	t := turn.NewMessage(cfg, in, corr, actID, mode == "async")
	var nj turn.ErrNotJournaled
	switch err := h.msgs.Take(t); {
	case errors.As(err, &nj):
		h.d.Activity.Finish(actID, wire.ActivityFailed, "not journaled")
		return &wire.Error{Code: "journal_unavailable",
			Message: "The message could not be stored durably, so it was not accepted; retry shortly.", Cause: err}
	case err != nil:
		h.d.Activity.Finish(actID, wire.ActivityFailed, "shutting down")
		return errShuttingDown
	}
	if t.Async {
		return c.JSON(http.StatusAccepted, wire.WebhookAccepted{Status: "accepted", CorrelationID: corr,
			Message: "The message was accepted; the reply will be POSTed to the callback URL when the agent finishes."})
	}
	return h.waitSync(c, t)
}

var errShuttingDown = &wire.Error{Code: "shutting_down",
	Message: "The agent is shutting down; retry shortly."}

// Resume picks up the messages an earlier run journaled and did not finish
// (turn.Messages.Resume).
func (h *Handler) Resume() int { return h.msgs.Resume() }

// waitSync blocks until the turn ends (200, or 502 for a failed turn), the
// sync timeout (504 reply_timeout, the reply will go to the outbox), or the
// caller leaving.
func (h *Handler) waitSync(c echo.Context, t *turn.Message) error {
	timer := time.NewTimer(h.d.SyncTimeout)
	defer timer.Stop()
	select {
	case <-t.Done():
	case <-timer.C:
	case <-c.Request().Context().Done():
	}
	res, finished, err := t.Outcome()
	if !finished {
		h.d.Activity.Finish(t.ActID, wire.ActivityTimedOut, "")
		if c.Request().Context().Err() != nil {
			return nil // nobody to answer; the reply goes to the outbox
		}
		return &wire.Error{Code: "reply_timeout",
			CorrelationID: t.Corr, ChannelID: t.Cfg.ChannelID,
			Message: fmt.Sprintf("The agent did not reply within %s. The reply will be put in the channel outbox "+
				"(GET …/agent/channels/webhook/outbox/%s) with this correlationId.", h.d.SyncTimeout, t.Cfg.ChannelID)}
	}
	if err != nil {
		h.d.Activity.Finish(t.ActID, wire.ActivityFailed, err.Error())
		return turnError(err, res.Reply, t.Corr)
	}
	h.d.Activity.Finish(t.ActID, wire.ActivityReplied, "")
	h.d.Activity.Add(wire.ActivityEvent{Direction: wire.DirectionOutbound, CorrelationID: t.Corr, SenderID: t.In.SenderID,
		SenderName: t.In.SenderName, Mode: "sync", Preview: res.Reply, Status: wire.ActivityDelivered, FinishedAt: h.now()})
	return c.JSON(http.StatusOK, wire.WebhookReply{Reply: res.Reply})
}
