// Package webhook is the pod side of the webhook channel (spec 1, 2.4, 2.5,
// 3.3, 4.2, 5.2, 7.2, 8; docs/design.md §6). The API's agent-proxy forwards
// /api/projects/{id}/agent-proxy/agent/channels/webhook/* here with the
// project's runtime token (checked by the group's middleware) and the
// caller's X-Webhook-Secret and body unchanged.
//
//	POST /agent/channels/webhook/incoming             message in; sync 200 {reply} / 504 reply_timeout, async 202
//	GET  /agent/channels/webhook/health               {connected, hasSecret, messageCount, outboxPending}
//	GET  /agent/channels/webhook/activity             the last 50 inbound and outbound events
//	GET  /agent/channels/webhook/outbox/:channelId    long-poll ?wait=≤30s&limit=20..100, acknowledges what it returns
//	                                                  (only with the in-memory outbox: in production the replies go to
//	                                                  the API's durable outbox, which serves this path from its database)
//
// incoming, activity and outbox require the channel secret (constant-time
// compare; an empty channel secret rejects every request). health is gated
// by the runtime token (and the API's cloud auth) only, so that hasSecret
// can tell an operator that the channel still needs a secret.
package webhook

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/activity"
	"github.com/svc-dev/svc/podagent/internal/callback"
	"github.com/svc-dev/svc/podagent/internal/channelcfg"
	"github.com/svc-dev/svc/podagent/internal/inbox"
	"github.com/svc-dev/svc/podagent/internal/outbox"
	"github.com/svc-dev/svc/podagent/internal/poderr"
	"github.com/svc-dev/svc/podagent/internal/turn"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/settings"
	"github.com/svc-dev/svc/shared/wire"
)

// Prefix is where the pod's route table mounts the channel.
const Prefix = internalapi.PodWebhook

// Agent runs one turn (agentloop.Agent).
type Agent = turn.Agent

// Callbacks deliver async replies (callback.Deliverer).
type Callbacks interface {
	CheckURL(raw string) error
	Deliver(ctx context.Context, d callback.Delivery) callback.Result
	// Once is one attempt without retries (replay, test message).
	Once(ctx context.Context, d callback.Delivery) wire.WebhookAttempt
}

// Outbox receives the replies that could not be given inline or by callback
// (outbox.Relay in production, outbox.Outbox without an API).
type Outbox interface {
	Put(channelID string, m wire.OutboxMessage)
	// Len is the number of the channel's messages the outbox holds.
	Len(channelID string) int
}

// taker is an outbox the pod serves itself (outbox.Outbox).
type taker interface {
	Take(ctx context.Context, channelID string, limit int, wait time.Duration) []wire.OutboxMessage
	Requeue(channelID string, ms []wire.OutboxMessage)
}

// Deps are what the handlers are built from.
type Deps struct {
	Channel channelcfg.Source
	// Agent talks to the model and runs tools; Committer commits what they
	// changed (nil: nothing is committed). A turn's order is package
	// turn's: agent → journal → commit (persist, record) → deliver.
	Agent     Agent
	Committer turn.Committer
	// Slot is the pod's one turn lock (nil: one of the channel's own).
	Slot      *turn.Slot
	Callbacks Callbacks
	Outbox    Outbox           // nil: a new in-memory outbox.Outbox
	Activity  *activity.Log    // nil: a new one
	Ready     func() error     // nil: always ready
	Log       *zap.Logger      // nil: no logs
	Now       func() time.Time // nil: time.Now
	// SyncTimeout is the sync reply timeout (spec 8: 120 s).
	SyncTimeout time.Duration
	// TurnTimeout bounds a turn running in the background.
	TurnTimeout time.Duration
	// MaxBodyBytes is the body limit (413 beyond).
	MaxBodyBytes int64
	// Closer, when set, is closed by Shutdown once running turns ended.
	Closer io.Closer
	// Journal, when set, keeps accepted async messages on disk until their
	// reply is delivered or in the outbox (the 202 is answered only once the
	// message is journaled), and the channel's messageCount; Resume picks up
	// what an earlier run left. nil: memory only (tests, no workspace).
	Journal *inbox.Journal
	// Durable, when set, is the API's durable outbox: health's
	// outboxPending adds what it holds to the pod's own copy. nil: no API.
	Durable DurableOutbox
	// Attempts, when set, is the attempt log's recorder (attemptlog, and a
	// hand-over queue of the channel's own when the pod gave none), closed
	// by Shutdown after the outbox.
	Attempts interface {
		Close(ctx context.Context) error
	}
}

// DurableOutbox counts the API's durable outbox (internalapi.Client).
type DurableOutbox interface {
	OutboxPending(ctx context.Context, timeout time.Duration) (wire.OutboxPending, error)
}

// durableCountTimeout bounds health's call to the API's outbox count.
const durableCountTimeout = 2 * time.Second

// outboxCloseGrace bounds the last hand-over of the outbox at Shutdown.
const outboxCloseGrace = 3 * time.Second

// Handler serves the routes.
type Handler struct {
	d         Deps
	msgs      *turn.Messages // a message's whole life
	log       *zap.Logger
	closeOnce sync.Once
	messages  atomic.Int64
}

// New builds the handler.
func New(d Deps) *Handler {
	if d.Outbox == nil {
		d.Outbox = outbox.New(0)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Activity == nil {
		d.Activity = activity.New(d.Now)
	}
	if d.Log == nil {
		d.Log = zap.NewNop()
	}
	d.SyncTimeout = settings.PositiveOr(d.SyncTimeout, DefaultSyncTimeout)
	d.TurnTimeout = settings.PositiveOr(d.TurnTimeout, DefaultTurnTimeout)
	d.MaxBodyBytes = settings.PositiveOr(d.MaxBodyBytes, DefaultMaxBodyBytes)
	runner := turn.New(turn.Options{Agent: d.Agent, Committer: d.Committer, Slot: d.Slot, Log: d.Log})
	return &Handler{d: d, log: d.Log.Named("webhook"), msgs: turn.NewMessages(turn.MessagesOptions{Runner: runner,
		Channel: d.Channel, Callbacks: d.Callbacks, Outbox: d.Outbox, Activity: d.Activity, Journal: d.Journal,
		TurnTimeout: d.TurnTimeout, Now: d.Now, Log: d.Log})}
}

// The channel's handlers; the pod's route table (server.New) mounts them
// under Prefix behind the runtime token.

// Incoming is POST …/incoming.
func (h *Handler) Incoming(c echo.Context) error { return h.wrap(h.incoming)(c) }

// Health is GET …/health.
func (h *Handler) Health(c echo.Context) error { return h.wrap(h.health)(c) }

// Activity is GET …/activity.
func (h *Handler) ActivityLog(c echo.Context) error { return h.wrap(h.activity)(c) }

// OutboxPoll is GET …/outbox/:channelId, served only when the outbox can be
// taken from (ServesOutbox).
func (h *Handler) OutboxPoll(c echo.Context) error { return h.wrap(h.outbox)(c) }

// ServesOutbox reports whether the pod serves the outbox poll itself (an
// in-memory outbox; with an API the API serves it from its database).
func (h *Handler) ServesOutbox() bool {
	_, ok := h.d.Outbox.(taker)
	return ok
}

// Outbox returns the outbox; Activity the activity log.
func (h *Handler) Outbox() Outbox          { return h.d.Outbox }
func (h *Handler) Activity() *activity.Log { return h.d.Activity }

// Shutdown refuses new messages (503), ends the callbacks' waits between
// attempts at once (their replies go to the outbox with the callback they
// were on, for the API's queue to continue), waits for the running turns
// and attempts until ctx ends, then cancels what is left (a cancelled
// callback puts its reply in the outbox too). An outbox with a Close(ctx) (outbox.Relay)
// is closed last: it makes one more attempt, bounded by outboxCloseGrace, to
// hand its messages to the API and keeps the rest in its journal for the
// next start (the git flush of the shutdown sequence must not wait on it).
func (h *Handler) Shutdown(ctx context.Context) error {
	err := h.msgs.Shutdown(ctx)
	h.closeOnce.Do(func() {
		if h.d.Closer != nil {
			_ = h.d.Closer.Close()
		}
		if oc, ok := h.d.Outbox.(interface{ Close(context.Context) error }); ok {
			octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), outboxCloseGrace)
			_ = oc.Close(octx)
			cancel()
		}
		if h.d.Attempts != nil {
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), outboxCloseGrace)
			_ = h.d.Attempts.Close(actx)
			cancel()
		}
	})
	return err
}

func (h *Handler) wrap(fn func(c echo.Context) error) echo.HandlerFunc {
	return func(c echo.Context) error {
		err := fn(c)
		if err == nil || c.Response().Committed {
			return nil
		}
		poderr.Write(c, err, h.log)
		return nil
	}
}

// config loads the channel configuration (503 when the API cannot be asked).
func (h *Handler) config(c echo.Context) (wire.ChannelConfig, error) {
	cfg, err := h.d.Channel.Channel(c.Request().Context())
	if err != nil {
		return cfg, &wire.Error{Code: "channel_config_unavailable",
			Message: "The channel configuration could not be loaded from the API; retry shortly.", Cause: err}
	}
	return cfg, nil
}

// authenticate checks X-Webhook-Secret against the channel secret, and the
// ones a rotation replaced while their overlap lasts, in
// constant time (wire.WebhookSecretMatches).
func (h *Handler) authenticate(c echo.Context) (wire.ChannelConfig, error) {
	cfg, err := h.config(c)
	if err != nil {
		return cfg, err
	}
	if cfg.Secret == "" {
		return cfg, &wire.Error{Code: "channel_secret_not_set",
			Message: "This channel has no secret configured, so it rejects every request. Set one in the channel settings."}
	}
	if !wire.WebhookSecretMatches(c.Request().Header.Get(wire.HeaderWebhookSecret), append([]string{cfg.Secret}, cfg.PreviousSecrets...)) {
		return cfg, &wire.Error{Code: "invalid_webhook_secret",
			Message: "Missing or invalid X-Webhook-Secret header."}
	}
	return cfg, nil
}

func (h *Handler) health(c echo.Context) error {
	cfg, cfgErr := h.d.Channel.Channel(c.Request().Context())
	reason := ""
	switch {
	case h.msgs.Closing():
		reason = wire.HealthShuttingDown
	case h.d.Ready != nil && h.d.Ready() != nil:
		reason = wire.HealthFenced // the pod's only readiness condition
	case cfgErr != nil:
		reason = wire.HealthConfigUnavailable
	}
	connected := reason == ""
	count := h.messages.Load()
	if h.d.Journal != nil {
		count = h.d.Journal.Counters().MessageCount
	}
	pending := h.d.Outbox.Len(cfg.ChannelID)
	if h.d.Durable != nil && cfgErr == nil {
		// What the pod handed over waits in the API's outbox: count it too.
		n, err := h.d.Durable.OutboxPending(c.Request().Context(), durableCountTimeout)
		switch {
		case err != nil:
			h.log.Debug("health: the API's outbox could not be counted", zap.Error(err))
		case n.ChannelID == cfg.ChannelID:
			pending += int(n.Pending)
		}
	}
	return c.JSON(http.StatusOK, wire.WebhookHealth{
		Connected:     connected,
		Reason:        reason,
		HasSecret:     cfgErr == nil && cfg.Secret != "",
		MessageCount:  count,
		OutboxPending: pending,
	})
}

func (h *Handler) activity(c echo.Context) error {
	if _, err := h.authenticate(c); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, wire.WebhookActivity{Events: h.d.Activity.List()})
}

func (h *Handler) now() time.Time { return h.d.Now().UTC() }

func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
