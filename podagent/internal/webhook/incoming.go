package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/agentloop"
	"github.com/svc-dev/svc/podagent/internal/callback"
	"github.com/svc-dev/svc/podagent/internal/inbox"
	"github.com/svc-dev/svc/podagent/internal/testhook"
	"github.com/svc-dev/svc/podagent/internal/turnorder"
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
	if h.closing.Load() {
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
	t := &turn{h: h, cfg: cfg, in: in, corr: corr, actID: actID, done: make(chan struct{})}
	t.async = mode == "async"
	if t.async && h.d.Journal != nil {
		// The 202 is a promise: the message is on disk before it is given.
		err := h.d.Journal.Accept(inbox.Entry{CorrelationID: corr, ChannelID: cfg.ChannelID, WebhookIncoming: in,
			AcceptedAt: h.now()})
		if err != nil {
			h.d.Activity.Finish(actID, wire.ActivityFailed, "not journaled")
			return &wire.Error{Code: "journal_unavailable",
				Message: "The message could not be stored durably, so it was not accepted; retry shortly.", Cause: err}
		}
		testhook.Reach(testhook.WebhookAccepted)
	}
	if !h.start(t) {
		h.d.Activity.Finish(actID, wire.ActivityFailed, "shutting down")
		if t.async && h.d.Journal != nil {
			_ = h.d.Journal.Done(corr)
		}
		return errShuttingDown
	}
	if t.async {
		return c.JSON(http.StatusAccepted, wire.WebhookAccepted{Status: "accepted", CorrelationID: corr,
			Message: "The message was accepted; the reply will be POSTed to the callback URL when the agent finishes."})
	}
	return h.waitSync(c, t)
}

// turn is one message on its way through the agent.
type turn struct {
	h     *Handler
	cfg   wire.ChannelConfig
	in    Incoming
	corr  string
	actID string
	async bool

	mu        sync.Mutex
	finished  bool
	abandoned bool // the sync caller stopped waiting: the reply goes to the outbox
	res       agentloop.Result
	err       error
	done      chan struct{} // closed when finished (under mu)
}

var errShuttingDown = &wire.Error{Code: "shutting_down",
	Message: "The agent is shutting down; retry shortly."}

// start runs the turn in the background, detached from the request: a sync
// timeout or a caller that goes away does not stop the agent. It returns
// false once Shutdown has started.
func (h *Handler) start(t *turn) bool {
	if !h.begin() {
		return false
	}
	go func() {
		defer h.wg.Done()
		if t.async {
			h.runAsync(t)
			return
		}
		res, err := h.run(t, nil)
		t.mu.Lock()
		t.res, t.err, t.finished = res, err, true
		abandoned := t.abandoned
		close(t.done)
		t.mu.Unlock()
		if abandoned {
			h.toOutbox(t, res.Reply, "late sync reply")
		}
	}()
	return true
}

func (t *turn) request() agentloop.Request {
	// An accepted async message waits out a plan limit within its turn's
	// deadline; a sync caller is told at once (turnError).
	return agentloop.Request{Message: t.in.Message, SenderID: t.in.SenderID, SenderName: t.in.SenderName,
		Channel: "webhook", CorrelationID: t.corr, Metadata: t.in.Metadata, WaitForLimits: t.async}
}

// run is one turn (package turnorder owns its order): the agent, then journal
// (the async inbox, before the commit), then the commit with its persist
// and record; the caller delivers what it returns.
func (h *Handler) run(t *turn, journal turnorder.Journal) (agentloop.Result, error) {
	ctx, cancel := context.WithTimeout(h.base, h.d.TurnTimeout)
	defer cancel()
	res, err := h.turns.Run(ctx, t.request(), journal)
	if res.Reply == "" && err == nil {
		res.Reply = "(the agent finished without a reply)"
	}
	if err != nil {
		h.log.Warn("agent turn failed", zap.String("correlationId", t.corr), zap.Error(err))
	}
	return res, err
}

// runAsync runs an async turn and delivers its reply. With a journal, the
// reply is journaled before the turn commits (a turn that committed never
// runs again) and the entry leaves the journal only once the reply was
// delivered or is in the outbox; a turn or a callback cut off by Shutdown
// stays journaled and resumes at the next start.
func (h *Handler) runAsync(t *turn) {
	j := h.d.Journal
	if j == nil {
		res, err := h.run(t, nil)
		h.finishInbound(t, err)
		h.deliver(t, res.Reply)
		return
	}
	if _, err := j.Update(t.corr, func(e *inbox.Entry) { e.Runs++ }); err != nil {
		h.log.Warn("journaling a turn's start failed", zap.String("correlationId", t.corr), zap.Error(err))
	}
	testhook.Reach(testhook.WebhookTurn)
	journal := func(reply string, failed bool) error {
		_, err := j.Update(t.corr, func(e *inbox.Entry) {
			e.State, e.Reply, e.Failed, e.RepliedAt = inbox.StateReplied, reply, failed, h.now()
		})
		return err
	}
	interrupted := func(err error) bool { return err != nil && h.base.Err() != nil }
	res, err := h.run(t, func(res agentloop.Result, err error) {
		if interrupted(err) {
			return // Shutdown cut the turn off: it runs again at the next start
		}
		if jerr := journal(res.Reply, err != nil); jerr != nil {
			h.log.Error("journaling a reply failed", zap.String("correlationId", t.corr), zap.Error(jerr))
		}
		testhook.Reach(testhook.WebhookReplied)
	})
	if interrupted(err) {
		h.d.Activity.Finish(t.actID, wire.ActivityFailed, "interrupted by shutdown; resumes at the next start")
		return
	}
	if e, _ := j.Get(t.corr); e.State != inbox.StateReplied || e.Reply != res.Reply {
		if jerr := journal(res.Reply, err != nil); jerr != nil {
			h.log.Error("journaling a reply failed", zap.String("correlationId", t.corr), zap.Error(jerr))
		}
	}
	h.finishInbound(t, err)
	h.deliver(t, res.Reply)
}

func (h *Handler) finishInbound(t *turn, err error) {
	status, errText := wire.ActivityReplied, ""
	if err != nil {
		status, errText = wire.ActivityFailed, err.Error()
	}
	h.d.Activity.Finish(t.actID, status, errText)
}

// Resume picks up the messages an earlier run journaled and did not finish
// (see runAsync), in the background: turns that never produced their reply
// run (once), replies not yet delivered are POSTed again with the same
// webhook-id. The channel configuration (secret, callbackHeaders) is the
// current one; Resume waits for the API to serve it.
func (h *Handler) Resume() int {
	j := h.d.Journal
	if j == nil {
		return 0
	}
	pending := j.Pending()
	if len(pending) == 0 || !h.begin() {
		return 0
	}
	h.log.Info("resuming journaled webhook messages", zap.Int("pending", len(pending)))
	go func() {
		defer h.wg.Done()
		cfg, ok := h.resumeConfig()
		if !ok {
			return
		}
		for _, e := range pending {
			c := cfg
			c.ChannelID = e.ChannelID
			t := &turn{h: h, cfg: c, in: e.WebhookIncoming, corr: e.CorrelationID, async: true, done: make(chan struct{})}
			t.actID = h.d.Activity.Add(wire.ActivityEvent{Direction: wire.DirectionInbound, CorrelationID: e.CorrelationID,
				SenderID: e.SenderID, SenderName: e.SenderName, Mode: "async", Preview: e.Message,
				Status: wire.ActivityProcessing, Error: "resumed after a restart"})
			if !h.begin() {
				return
			}
			go func() {
				defer h.wg.Done()
				if e.State == inbox.StateReplied {
					h.finishInbound(t, nil)
					h.deliver(t, e.Reply)
					return
				}
				h.runAsync(t)
			}()
		}
	}()
	return len(pending)
}

// resumeConfig loads the channel configuration, retrying until it comes or
// Shutdown starts.
func (h *Handler) resumeConfig() (wire.ChannelConfig, bool) {
	wait := 200 * time.Millisecond
	for {
		cfg, err := h.d.Channel.Channel(h.base)
		if err == nil {
			return cfg, true
		}
		h.log.Warn("resuming journaled messages waits for the channel configuration", zap.Duration("in", wait), zap.Error(err))
		timer := time.NewTimer(wait)
		select {
		case <-h.base.Done():
			timer.Stop()
			return cfg, false
		case <-timer.C:
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// waitSync blocks until the turn ends (200, or 502 for a failed turn), the
// sync timeout (504 reply_timeout, the reply will go to the outbox), or the
// caller leaving.
func (h *Handler) waitSync(c echo.Context, t *turn) error {
	timer := time.NewTimer(h.d.SyncTimeout)
	defer timer.Stop()
	select {
	case <-t.done:
	case <-timer.C:
	case <-c.Request().Context().Done():
	}
	t.mu.Lock()
	if !t.finished {
		t.abandoned = true
		t.mu.Unlock()
		h.d.Activity.Finish(t.actID, wire.ActivityTimedOut, "")
		if c.Request().Context().Err() != nil {
			return nil // nobody to answer; the reply goes to the outbox
		}
		return &wire.Error{Code: "reply_timeout",
			CorrelationID: t.corr, ChannelID: t.cfg.ChannelID,
			Message: fmt.Sprintf("The agent did not reply within %s. The reply will be put in the channel outbox "+
				"(GET …/agent/channels/webhook/outbox/%s) with this correlationId.", h.d.SyncTimeout, t.cfg.ChannelID)}
	}
	res, err := t.res, t.err
	t.mu.Unlock()
	if err != nil {
		h.d.Activity.Finish(t.actID, wire.ActivityFailed, err.Error())
		return turnError(err, res.Reply, t.corr)
	}
	h.d.Activity.Finish(t.actID, wire.ActivityReplied, "")
	h.d.Activity.Add(wire.ActivityEvent{Direction: wire.DirectionOutbound, CorrelationID: t.corr, SenderID: t.in.SenderID,
		SenderName: t.in.SenderName, Mode: "sync", Preview: res.Reply, Status: wire.ActivityDelivered, FinishedAt: h.now()})
	return c.JSON(http.StatusOK, wire.WebhookReply{Reply: res.Reply})
}

// deliver POSTs an async reply to the callback URL; when that fails for
// good, the reply goes to the outbox.
func (h *Handler) deliver(t *turn, reply string) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // the reply's text as the agent wrote it
	err := enc.Encode(wire.WebhookCallback{Reply: reply, CorrelationID: t.corr, Metadata: metadataOrEmpty(t.in.Metadata)})
	body := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if err != nil {
		h.toOutbox(t, reply, "encoding the callback failed")
		h.journalDone(t)
		return
	}
	cfg := h.deliveryConfig(t)
	if failing := failingEndpoint(cfg, t.in.CallbackURL); failing != "" {
		// A failing endpoint: no attempt until a test message
		// to it succeeds; the reply waits in the outbox.
		h.toOutbox(t, reply, "callback endpoint "+failing+" is marked failing; send it a test message to re-enable it")
		h.journalDone(t)
		return
	}
	outID := h.d.Activity.Add(wire.ActivityEvent{Direction: wire.DirectionOutbound, CorrelationID: t.corr,
		SenderID: t.in.SenderID, SenderName: t.in.SenderName, Mode: "async", Preview: reply, Status: wire.ActivityDelivering})
	res := h.d.Callbacks.Deliver(h.base, callback.Delivery{URL: t.in.CallbackURL, MsgID: webhookID(t.corr),
		Secret: cfg.Secret, OldSecrets: cfg.PreviousSecrets, Headers: cfg.CallbackHeaders, Body: body,
		CorrelationID: t.corr, ChannelID: t.cfg.ChannelID, Kind: wire.AttemptDelivery})
	if res.Delivered {
		h.d.Activity.Update(outID, func(e *wire.ActivityEvent) {
			e.Status, e.Attempts, e.FinishedAt = wire.ActivityDelivered, res.Attempts, h.now()
		})
		// The API's record of the accepted message is closed by a notice
		// (journaled by the relay before the message leaves the journal).
		// It carries the reply, which the API keeps for a replay.
		h.d.Outbox.Put(t.cfg.ChannelID, wire.OutboxMessage{ID: newID("obx_"), OutboxReply: wire.OutboxReply{CorrelationID: t.corr,
			Reply: reply, Metadata: metadataOrEmpty(t.in.Metadata), CreatedAt: h.now(), Status: wire.OutboxStatusDelivered}})
		h.journalDone(t)
		return
	}
	if h.d.Journal != nil && h.base.Err() != nil {
		// Shutdown cut the retries off: they resume at the next start.
		h.d.Activity.Update(outID, func(e *wire.ActivityEvent) {
			e.Attempts, e.Error = res.Attempts, "interrupted by shutdown; resumes at the next start"
		})
		return
	}
	errText := "callback not delivered"
	if res.Err != nil {
		errText = res.Err.Error()
	}
	h.d.Activity.Update(outID, func(e *wire.ActivityEvent) {
		e.Status, e.Attempts, e.Error, e.FinishedAt = wire.ActivityFailed, res.Attempts, errText, h.now()
	})
	h.toOutbox(t, reply, errText)
	h.journalDone(t)
}

// journalDone removes a message whose reply was delivered or put in the
// outbox (the outbox relay journals it first) from the journal.
func (h *Handler) journalDone(t *turn) {
	if h.d.Journal == nil || !t.async {
		return
	}
	if err := h.d.Journal.Done(t.corr); err != nil {
		h.log.Warn("removing a journaled message failed; it may be delivered again",
			zap.String("correlationId", t.corr), zap.Error(err))
	}
}

func (h *Handler) toOutbox(t *turn, reply, why string) {
	h.d.Outbox.Put(t.cfg.ChannelID, wire.OutboxMessage{ID: newID("obx_"), OutboxReply: wire.OutboxReply{CorrelationID: t.corr, Reply: reply,
		Metadata: metadataOrEmpty(t.in.Metadata), CreatedAt: h.now()}})
	h.d.Activity.Add(wire.ActivityEvent{Direction: wire.DirectionOutbound, CorrelationID: t.corr, SenderID: t.in.SenderID,
		SenderName: t.in.SenderName, Mode: "outbox", Preview: reply, Status: wire.ActivityOutboxed, Error: why, FinishedAt: h.now()})
	h.log.Info("reply put in the outbox", zap.String("correlationId", t.corr), zap.String("why", why))
}
