package turn

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sethvargo/go-retry"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/activity"
	"github.com/svc-dev/svc/podagent/internal/agentloop"
	"github.com/svc-dev/svc/podagent/internal/callback"
	"github.com/svc-dev/svc/podagent/internal/channelcfg"
	"github.com/svc-dev/svc/podagent/internal/handover"
	"github.com/svc-dev/svc/podagent/internal/inbox"
	"github.com/svc-dev/svc/podagent/internal/journal"
	"github.com/svc-dev/svc/podagent/internal/testhook"
	"github.com/svc-dev/svc/shared/wait"
	"github.com/svc-dev/svc/shared/wire"
)

// A message's whole life is this file's (spec 2.4, 2.5, 3.3; docs/
// webhook-delivery.md): accepted (journaled in the inbox before the 202),
// its turn run (Runner: agent → journal the reply → commit), its reply
// delivered (the callback, or the outbox), the message ended in the same
// journal transaction as its reply's hand-over, and resumed after a
// restart. The channel's HTTP side (package webhook) parses, authenticates
// and waits for a sync reply.

// Callbacks deliver async replies (callback.Deliverer).
type Callbacks interface {
	Deliver(ctx context.Context, d callback.Delivery) callback.Result
}

// Outbox receives the replies that could not be given inline or by callback
// (outbox.Relay in production, outbox.Outbox without an API).
type Outbox interface {
	Put(channelID string, m wire.OutboxMessage)
}

// MessagesOptions configure NewMessages.
type MessagesOptions struct {
	Runner    *Runner
	Channel   channelcfg.Source
	Callbacks Callbacks
	Outbox    Outbox
	Activity  *activity.Log
	// Journal keeps accepted async messages until their reply is delivered
	// or in the outbox (nil: memory only).
	Journal *inbox.Journal
	// TurnTimeout bounds a turn running in the background.
	TurnTimeout time.Duration
	Now         func() time.Time
	Log         *zap.Logger
}

// ErrNotJournaled: an async message could not be stored durably, so it was
// not accepted.
type ErrNotJournaled struct{ Err error }

func (e ErrNotJournaled) Error() string {
	return "turn: the message could not be journaled: " + e.Err.Error()
}
func (e ErrNotJournaled) Unwrap() error { return e.Err }

// Messages runs the channel's messages through their turns. Safe for
// concurrent use.
type Messages struct {
	o       MessagesOptions
	runner  *Runner
	log     *zap.Logger
	base    context.Context
	cancel  context.CancelFunc
	stop    chan struct{} // closed when Shutdown starts: callbacks stop retrying
	stopped sync.Once
	wg      sync.WaitGroup
	mu      sync.Mutex // orders wg.Add against Shutdown's Wait
	closing atomic.Bool
}

// NewMessages returns the owner of the channel's messages.
func NewMessages(o MessagesOptions) *Messages {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	base, cancel := context.WithCancel(context.Background())
	return &Messages{o: o, runner: o.Runner, log: o.Log.Named("webhook"), base: base, cancel: cancel,
		stop: make(chan struct{})}
}

// Message is one message on its way through its turn.
type Message struct {
	Cfg   wire.ChannelConfig
	In    wire.WebhookIncoming
	Corr  string
	ActID string
	Async bool

	mu        sync.Mutex
	finished  bool
	abandoned bool // the sync caller stopped waiting: the reply goes to the outbox
	res       agentloop.Result
	err       error
	done      chan struct{} // closed when finished (under mu)
}

// NewMessage is a message to Take.
func NewMessage(cfg wire.ChannelConfig, in wire.WebhookIncoming, corr, actID string, async bool) *Message {
	return &Message{Cfg: cfg, In: in, Corr: corr, ActID: actID, Async: async, done: make(chan struct{})}
}

// Done is closed when a sync message's turn ended.
func (t *Message) Done() <-chan struct{} { return t.done }

// Outcome is the turn's result once it finished; otherwise it marks the
// message abandoned (its reply goes to the outbox when it comes) and
// reports finished false.
func (t *Message) Outcome() (res agentloop.Result, finished bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.finished {
		t.abandoned = true
		return res, false, nil
	}
	return t.res, true, t.err
}

// Take accepts a message: an async one is journaled first (the 202 is a
// promise), then its turn starts in the background, detached from the
// request. ErrClosed once Shutdown has started.
func (m *Messages) Take(t *Message) error {
	if t.Async && m.o.Journal != nil {
		err := m.o.Journal.Accept(inbox.Entry{CorrelationID: t.Corr, ChannelID: t.Cfg.ChannelID, WebhookIncoming: t.In,
			AcceptedAt: m.now()})
		if err != nil {
			return ErrNotJournaled{err}
		}
		testhook.Reach(testhook.WebhookAccepted)
	}
	if !m.start(t) {
		if t.Async && m.o.Journal != nil {
			_ = m.o.Journal.Done(t.Corr)
		}
		return ErrClosed
	}
	return nil
}

// Closing reports whether Shutdown has started.
func (m *Messages) Closing() bool { return m.closing.Load() }

// Shutdown refuses new messages, tells the callbacks between two attempts
// to stop retrying (their replies go to the outbox, and the API's delivery
// queue continues the schedule with the same webhook-id), waits for the
// running turns and attempts until ctx ends, then cancels what is left (a
// cancelled callback puts its reply in the outbox too; a journaled turn cut
// off resumes at the next start).
func (m *Messages) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	m.closing.Store(true)
	m.mu.Unlock()
	m.stopped.Do(func() { close(m.stop) })
	err := wait.Group(ctx, &m.wg)
	m.cancel()
	m.wg.Wait()
	return err
}

// begin registers background work; false once Shutdown has started.
func (m *Messages) begin() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closing.Load() {
		return false
	}
	m.wg.Add(1)
	return true
}

func (m *Messages) now() time.Time { return m.o.Now().UTC() }

func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// metadataOrEmpty is the metadata echoed in callbacks and outbox messages.
func metadataOrEmpty(md json.RawMessage) json.RawMessage {
	if len(md) == 0 {
		return json.RawMessage("{}")
	}
	return md
}

// start runs the turn in the background, detached from the request: a sync
// timeout or a caller that goes away does not stop the agent. It returns
// false once Shutdown has started.
func (m *Messages) start(t *Message) bool {
	if !m.begin() {
		return false
	}
	go func() {
		defer m.wg.Done()
		if t.Async {
			m.runAsync(t)
			return
		}
		res, err := m.run(t, nil)
		t.mu.Lock()
		t.res, t.err, t.finished = res, err, true
		abandoned := t.abandoned
		close(t.done)
		t.mu.Unlock()
		if abandoned {
			m.toOutbox(t, res.Reply, "late sync reply")
		}
	}()
	return true
}

func (t *Message) request() agentloop.Request {
	// An accepted async message waits out a plan limit within its turn's
	// deadline; a sync caller is told at once (turnError).
	return agentloop.Request{Message: t.In.Message, SenderID: t.In.SenderID, SenderName: t.In.SenderName,
		Channel: "webhook", CorrelationID: t.Corr, Metadata: t.In.Metadata, WaitForLimits: t.Async}
}

// run is one turn (Runner owns its order): the agent, then journal
// (the async inbox, before the commit), then the commit with its persist
// and record; the caller delivers what it returns.
func (m *Messages) run(t *Message, journal Journal) (agentloop.Result, error) {
	ctx, cancel := context.WithTimeout(m.base, m.o.TurnTimeout)
	defer cancel()
	res, err := m.runner.Run(ctx, t.request(), journal)
	if res.Reply == "" && err == nil {
		res.Reply = "(the agent finished without a reply)"
	}
	if err != nil {
		m.log.Warn("agent turn failed", zap.String("correlationId", t.Corr), zap.Error(err))
	}
	return res, err
}

// runAsync runs an async turn and delivers its reply. With a journal, the
// reply is journaled before the turn commits (a turn that committed never
// runs again) and the entry leaves the journal only once the reply was
// delivered or is in the outbox; a turn or a callback cut off by Shutdown
// stays journaled and resumes at the next start.
func (m *Messages) runAsync(t *Message) {
	j := m.o.Journal
	if j == nil {
		res, err := m.run(t, nil)
		m.finishInbound(t, err)
		m.deliver(t, res.Reply)
		return
	}
	if _, err := j.Update(t.Corr, func(e *inbox.Entry) { e.Runs++ }); err != nil {
		m.log.Warn("journaling a turn's start failed", zap.String("correlationId", t.Corr), zap.Error(err))
	}
	testhook.Reach(testhook.WebhookTurn)
	journal := func(reply string, failed bool) error {
		_, err := j.Update(t.Corr, func(e *inbox.Entry) {
			e.State, e.Reply, e.Failed, e.RepliedAt = inbox.StateReplied, reply, failed, m.now()
		})
		return err
	}
	interrupted := func(err error) bool { return err != nil && m.base.Err() != nil }
	res, err := m.run(t, func(res agentloop.Result, err error) {
		if interrupted(err) {
			return // Shutdown cut the turn off: it runs again at the next start
		}
		if jerr := journal(res.Reply, err != nil); jerr != nil {
			m.log.Error("journaling a reply failed", zap.String("correlationId", t.Corr), zap.Error(jerr))
		}
		testhook.Reach(testhook.WebhookReplied)
	})
	if interrupted(err) {
		m.o.Activity.Finish(t.ActID, wire.ActivityFailed, "interrupted by shutdown; resumes at the next start")
		return
	}
	if e, _ := j.Get(t.Corr); e.State != inbox.StateReplied || e.Reply != res.Reply {
		if jerr := journal(res.Reply, err != nil); jerr != nil {
			m.log.Error("journaling a reply failed", zap.String("correlationId", t.Corr), zap.Error(jerr))
		}
	}
	m.finishInbound(t, err)
	m.deliver(t, res.Reply)
}

func (m *Messages) finishInbound(t *Message, err error) {
	status, errText := wire.ActivityReplied, ""
	if err != nil {
		status, errText = wire.ActivityFailed, err.Error()
	}
	m.o.Activity.Finish(t.ActID, status, errText)
}

// Resume picks up the messages an earlier run journaled and did not finish
// (see runAsync), in the background: turns that never produced their reply
// run (once), replies not yet delivered are POSTed again with the same
// webhook-id. The channel configuration (secret, callbackHeaders) is the
// current one; Resume waits for the API to serve it.
func (m *Messages) Resume() int {
	j := m.o.Journal
	if j == nil {
		return 0
	}
	pending := j.Pending()
	if len(pending) == 0 || !m.begin() {
		return 0
	}
	m.log.Info("resuming journaled webhook messages", zap.Int("pending", len(pending)))
	go func() {
		defer m.wg.Done()
		cfg, ok := m.resumeConfig()
		if !ok {
			return
		}
		for _, e := range pending {
			c := cfg
			c.ChannelID = e.ChannelID
			t := &Message{Cfg: c, In: e.WebhookIncoming, Corr: e.CorrelationID, Async: true, done: make(chan struct{})}
			t.ActID = m.o.Activity.Add(wire.ActivityEvent{Direction: wire.DirectionInbound, CorrelationID: e.CorrelationID,
				SenderID: e.SenderID, SenderName: e.SenderName, Mode: "async", Preview: e.Message,
				Status: wire.ActivityProcessing, Error: "resumed after a restart"})
			if !m.begin() {
				return
			}
			go func() {
				defer m.wg.Done()
				if e.State == inbox.StateReplied {
					m.finishInbound(t, nil)
					m.deliver(t, e.Reply)
					return
				}
				m.runAsync(t)
			}()
		}
	}()
	return len(pending)
}

// resumeConfig loads the channel configuration, retrying until it comes or
// Shutdown starts.
func (m *Messages) resumeConfig() (wire.ChannelConfig, bool) {
	var cfg wire.ChannelConfig
	b := retry.WithJitterPercent(handover.JitterPercent,
		retry.WithCappedDuration(handover.DefaultRetryMax, retry.NewExponential(200*time.Millisecond)))
	err := retry.Do(m.base, b, func(ctx context.Context) error {
		var err error
		if cfg, err = m.o.Channel.Channel(ctx); err != nil {
			m.log.Warn("resuming journaled messages waits for the channel configuration", zap.Error(err))
			return retry.RetryableError(err)
		}
		return nil
	})
	return cfg, err == nil
}

// deliver POSTs an async reply to the callback URL; when that fails for
// good, the reply goes to the outbox.
func (m *Messages) deliver(t *Message, reply string) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // the reply's text as the agent wrote it
	err := enc.Encode(wire.WebhookCallback{Reply: reply, CorrelationID: t.Corr, Metadata: metadataOrEmpty(t.In.Metadata)})
	body := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if err != nil {
		m.toOutboxDone(t, reply, "encoding the callback failed")
		return
	}
	cfg := m.deliveryConfig(t)
	if failing := failingEndpoint(cfg, t.In.CallbackURL); failing != "" {
		// A failing endpoint: no attempt until a test message
		// to it succeeds; the reply waits in the outbox.
		m.toOutboxDone(t, reply, "callback endpoint "+failing+" is marked failing; send it a test message to re-enable it")
		return
	}
	outID := m.o.Activity.Add(wire.ActivityEvent{Direction: wire.DirectionOutbound, CorrelationID: t.Corr,
		SenderID: t.In.SenderID, SenderName: t.In.SenderName, Mode: "async", Preview: reply, Status: wire.ActivityDelivering})
	res := m.o.Callbacks.Deliver(callback.WithStop(m.base, m.stop), callback.Delivery{URL: t.In.CallbackURL, MsgID: WebhookID(t.Corr),
		Secret: cfg.Secret, OldSecrets: cfg.PreviousSecrets, SigningKey: cfg.SigningKey, Headers: cfg.CallbackHeaders, Body: body,
		CorrelationID: t.Corr, ChannelID: t.Cfg.ChannelID, Kind: wire.AttemptDelivery})
	if res.Delivered {
		m.o.Activity.Update(outID, func(e *wire.ActivityEvent) {
			e.Status, e.Attempts, e.FinishedAt = wire.ActivityDelivered, res.Attempts, m.now()
		})
		// The API's record of the accepted message is closed by a notice
		// (journaled by the relay before the message leaves the journal).
		// It carries the reply, which the API keeps for a replay.
		m.handOver(t, wire.OutboxMessage{ID: newID("obx_"), OutboxReply: wire.OutboxReply{CorrelationID: t.Corr,
			Reply: reply, Metadata: metadataOrEmpty(t.In.Metadata), CreatedAt: m.now(), Status: wire.OutboxStatusDelivered}})
		return
	}
	errText := "callback not delivered"
	if res.Err != nil {
		errText = res.Err.Error()
	}
	msg := m.outboxReply(t, reply)
	if errors.Is(res.Err, callback.ErrHandedOff) || m.base.Err() != nil {
		// Shutdown cut the schedule off: the reply goes to the outbox with
		// the callback it was on, and the API's delivery queue continues it
		// (same webhook-id). The message leaves the journal in the
		// hand-over's transaction, so the next start does not deliver it
		// again.
		errText = "the pod stopped mid-schedule; the API continues the retries"
		msg.Continue = &wire.OutboxContinue{CallbackURL: t.In.CallbackURL, WebhookID: WebhookID(t.Corr), Attempts: res.Attempts}
	}
	m.o.Activity.Update(outID, func(e *wire.ActivityEvent) {
		e.Status, e.Attempts, e.Error, e.FinishedAt = wire.ActivityFailed, res.Attempts, errText, m.now()
	})
	m.handOver(t, msg)
	m.outboxed(t, reply, errText)
}

// journalDone removes a message whose reply was delivered or put in the
// outbox (the outbox relay journals it first) from the journal.
func (m *Messages) journalDone(t *Message) {
	if m.o.Journal == nil || !t.Async {
		return
	}
	if err := m.o.Journal.Done(t.Corr); err != nil {
		m.log.Warn("removing a journaled message failed; it may be delivered again",
			zap.String("correlationId", t.Corr), zap.Error(err))
	}
}

// handOver puts m in the outbox and, for a journaled async message, ends
// the message in the same journal transaction (outbox.Relay.PutWith with
// inbox.Journal.DoneWith): a crash between the two can neither lose the
// reply nor deliver it twice. An outbox without a journal of its own (the
// in-memory one) puts, then the message is ended.
func (m *Messages) handOver(t *Message, msg wire.OutboxMessage) {
	ob, ok := m.o.Outbox.(interface {
		PutWith(channelID string, m wire.OutboxMessage, also ...journal.Op) error
	})
	if !ok || m.o.Journal == nil || !t.Async {
		m.o.Outbox.Put(t.Cfg.ChannelID, msg)
		m.journalDone(t)
		return
	}
	err := m.o.Journal.DoneWith(t.Corr, func(done journal.Op) error { return ob.PutWith(t.Cfg.ChannelID, msg, done) })
	if err != nil {
		m.log.Warn("journaling the hand-over of a reply failed; the message stays journaled and may be delivered again",
			zap.String("correlationId", t.Corr), zap.Error(err))
	}
}

// toOutboxDone puts the reply in the outbox and ends the message (handOver).
func (m *Messages) toOutboxDone(t *Message, reply, why string) {
	m.handOver(t, m.outboxReply(t, reply))
	m.outboxed(t, reply, why)
}

func (m *Messages) outboxReply(t *Message, reply string) wire.OutboxMessage {
	return wire.OutboxMessage{ID: newID("obx_"), OutboxReply: wire.OutboxReply{CorrelationID: t.Corr, Reply: reply,
		Metadata: metadataOrEmpty(t.In.Metadata), CreatedAt: m.now()}}
}

// toOutbox puts a sync reply nobody waited for in the outbox.
func (m *Messages) toOutbox(t *Message, reply, why string) {
	m.o.Outbox.Put(t.Cfg.ChannelID, m.outboxReply(t, reply))
	m.outboxed(t, reply, why)
}

func (m *Messages) outboxed(t *Message, reply, why string) {
	m.o.Activity.Add(wire.ActivityEvent{Direction: wire.DirectionOutbound, CorrelationID: t.Corr, SenderID: t.In.SenderID,
		SenderName: t.In.SenderName, Mode: "outbox", Preview: reply, Status: wire.ActivityOutboxed, Error: why, FinishedAt: m.now()})
	m.log.Info("reply put in the outbox", zap.String("correlationId", t.Corr), zap.String("why", why))
}

// deliveryConfig is the channel configuration a callback is signed with:
// the current one (a rotation reaches retries at once), or the one the
// message arrived with when the API cannot be asked.
func (m *Messages) deliveryConfig(t *Message) wire.ChannelConfig {
	cfg, err := m.o.Channel.Channel(m.base)
	if err != nil || cfg.Secret == "" {
		return t.Cfg
	}
	return cfg
}

// failingEndpoint returns the endpoint of url when the API marked it
// failing, "" otherwise.
func failingEndpoint(cfg wire.ChannelConfig, url string) string {
	ep := wire.WebhookEndpoint(url)
	for _, f := range cfg.FailingEndpoints {
		if f == ep {
			return ep
		}
	}
	return ""
}

// WebhookID is the webhook-id of a message: the same on every attempt,
// after a restart and on a replay.
func WebhookID(corr string) string { return "msg_" + strings.TrimPrefix(corr, "cor_") }
