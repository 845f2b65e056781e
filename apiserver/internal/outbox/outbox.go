// Package outbox is the durable webhook outbox (spec 4.2, docs/design.md §6):
// replies of sync requests that timed out (504 reply_timeout) and async
// replies whose callback gave up, kept in the Outbox's database so that a pod
// restart or rescheduling loses none of them. The pod hands messages over
// and counts them through agentapi (POST /internal/projects/{id}/outbox,
// GET …/outbox/pending: Put and Pending here); integrations read them
// through webhookapi's long-poll (GET
// /api/projects/{id}/agent-proxy/agent/channels/webhook/outbox/{channelId},
// Poll here), served from the database, so it answers with the agent down.
// This package knows nothing of HTTP.
//
// A poll returns the oldest undelivered messages of the channel (limit
// default 20, max 100) and marks them delivered in the same statement; with
// none it waits up to ?wait= (max 30 s) for one. A message put through this
// replica wakes its pollers at once; messages put through another replica
// are seen by the next database poll (PollInterval).
package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/wire"
)

// Defaults.
const (
	// DefaultPollInterval is how often a waiting poll looks at the database
	// for messages put through another replica.
	DefaultPollInterval = 500 * time.Millisecond
	// MaxBodyBytes bounds one POST (a reply plus the caller's metadata,
	// itself bounded by the pod's 1 MiB body limit).
	MaxBodyBytes = 8 << 20
	// MaxCorrelationIDBytes bounds the correlation id.
	MaxCorrelationIDBytes = 200
)

// Store is what the Outbox needs from the database (store.Store).
type Store interface {
	GetChannel(ctx context.Context, projectID string) (store.Channel, error)
	PutOutbox(ctx context.Context, m store.OutboxMessage) (store.OutboxMessage, bool, error)
	TakeOutbox(ctx context.Context, projectID, channelID string, limit int) ([]store.OutboxMessage, error)
	ReleaseOutbox(ctx context.Context, projectID string, ids []string) error
	AcceptOutbox(ctx context.Context, projectID, channelID, correlationID string, deadline time.Time) error
	CountOutbox(ctx context.Context, projectID, channelID string) (int64, error)
}

// DefaultAnswerDeadline is how long an accepted async message may go
// without its reply or delivery notice before a poll returns it as
// unanswered: the pod's turn timeout (15 min) plus its callback schedule
// (about 4 min) and room for a restart that resumes it.
const DefaultAnswerDeadline = 30 * time.Minute

// Outbox keeps the messages and serves the poll. The zero value is not
// usable; call New.
type Outbox struct {
	store Store
	log   *zap.Logger
	// PollInterval: DefaultPollInterval when zero.
	PollInterval time.Duration
	// AnswerDeadline: DefaultAnswerDeadline when zero.
	AnswerDeadline time.Duration
	// QueueDelay, when set, queues every reply put for the API's callback
	// delivery (webhookqueue) after the delay it returns; the queue drops
	// what the pod's attempt log says it must not deliver.
	QueueDelay func() time.Duration

	mu sync.Mutex
	// wakes has one channel per polled (project, channel): closed and
	// dropped when a message is put.
	wakes map[string]chan struct{}
}

// New returns the outbox over s.
func New(s Store, log *zap.Logger) *Outbox {
	if log == nil {
		log = zap.NewNop()
	}
	return &Outbox{store: s, log: log, wakes: map[string]chan struct{}{}}
}

func key(projectID, channelID string) string { return projectID + "\x00" + channelID }

// wakeup returns a channel closed by the next notify of the key.
func (a *Outbox) wakeup(k string) <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	ch, ok := a.wakes[k]
	if !ok {
		ch = make(chan struct{})
		a.wakes[k] = ch
	}
	return ch
}

func (a *Outbox) notify(k string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ch, ok := a.wakes[k]; ok {
		close(ch)
		delete(a.wakes, k)
	}
}

// ChannelNotFound is the error of a channel id that is not the project's.
func ChannelNotFound() *wire.Error {
	return wire.Coded(wire.CodeChannelNotFound, "No channel with this id on this project.")
}

// Put keeps one message the project's pod handed over (agentapi's POST
// /internal/projects/{id}/outbox), idempotent on (project, correlationId):
// created is false when the message was already kept. A message that is
// not delivered yet wakes this replica's pollers of its channel at once.
func (a *Outbox) Put(ctx context.Context, projectID string, in wire.OutboxPut) (id string, created bool, err error) {
	metadata, err := validate(in)
	if err != nil {
		return "", false, wire.Coded(wire.CodeInvalidOutboxMessage, err.Error())
	}
	ch, err := a.store.GetChannel(ctx, projectID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && ch.ID != in.ChannelID) {
		return "", false, ChannelNotFound()
	}
	if err != nil {
		return "", false, wire.Unavailable(err)
	}
	row := store.OutboxMessage{ProjectID: projectID, ChannelID: in.ChannelID,
		CorrelationID: in.CorrelationID, Reply: in.Reply, Metadata: metadata, CreatedAt: in.CreatedAt, Status: in.Status}
	if a.QueueDelay != nil && in.Status != wire.OutboxStatusDelivered {
		t := time.Now().Add(a.QueueDelay())
		row.NextAttemptAt = &t
		if c := in.Continue; c != nil && c.CallbackURL != "" && c.WebhookID != "" && c.Attempts >= 0 {
			// A pod stopped mid-schedule: the queue continues its callback
			// without waiting for the attempt log to say how it ended.
			row.CallbackURL, row.WebhookID, row.AttemptBase = c.CallbackURL, c.WebhookID, c.Attempts
		}
	}
	m, created, err := a.store.PutOutbox(ctx, row)
	if err != nil {
		return "", false, wire.Unavailable(err)
	}
	if created {
		if in.Status != wire.OutboxStatusDelivered {
			a.notify(key(projectID, in.ChannelID))
		}
		a.log.Info("outbox message stored", zap.String("projectId", projectID), zap.String("correlationId", in.CorrelationID))
	}
	return m.ID, created, nil
}

// Pending is the number of the channel's messages a poll would return now
// (agentapi's GET /internal/projects/{id}/outbox/pending, the pod's health).
func (a *Outbox) Pending(ctx context.Context, projectID string) (wire.OutboxPending, error) {
	ch, err := a.store.GetChannel(ctx, projectID)
	if errors.Is(err, store.ErrNotFound) {
		return wire.OutboxPending{}, ChannelNotFound()
	}
	if err != nil {
		return wire.OutboxPending{}, wire.Unavailable(err)
	}
	n, err := a.store.CountOutbox(ctx, projectID, ch.ID)
	if err != nil {
		return wire.OutboxPending{}, wire.Unavailable(err)
	}
	return wire.OutboxPending{ChannelID: ch.ID, Pending: n}, nil
}

// validate names every offending field and returns the metadata to store.
func validate(in wire.OutboxPut) (string, error) {
	var bad []string
	if in.ChannelID == "" {
		bad = append(bad, "channelId: required")
	}
	switch {
	case in.CorrelationID == "":
		bad = append(bad, "correlationId: required")
	case len(in.CorrelationID) > MaxCorrelationIDBytes || !utf8.ValidString(in.CorrelationID):
		bad = append(bad, "correlationId: at most 200 bytes of UTF-8")
	}
	switch in.Status {
	case "", wire.OutboxStatusReplied, wire.OutboxStatusDelivered:
	default:
		bad = append(bad, "status: empty, replied or delivered")
	}
	if !utf8.ValidString(in.Reply) {
		bad = append(bad, "reply: must be UTF-8")
	}
	metadata := strings.TrimSpace(string(in.Metadata))
	if metadata == "" || metadata == "null" {
		metadata = "{}"
	} else if metadata[0] != '{' {
		bad = append(bad, "metadata: must be a JSON object")
	}
	if len(bad) > 0 {
		return "", errors.New(strings.Join(bad, "; "))
	}
	return metadata, nil
}

// RecordAccepted keeps the Outbox's record of an async message the project's
// pod accepted (the agent-proxy calls it on the pod's 202, before the 202
// reaches the caller): if neither its reply nor its delivery notice arrives
// by AnswerDeadline, a poll returns it with status unanswered, so what the
// pod promised never silently vanishes, also when its disk is gone.
func (a *Outbox) RecordAccepted(ctx context.Context, projectID, correlationID string) error {
	ch, err := a.store.GetChannel(ctx, projectID)
	if err != nil {
		return err
	}
	d := a.AnswerDeadline
	if d <= 0 {
		d = DefaultAnswerDeadline
	}
	return a.store.AcceptOutbox(ctx, projectID, ch.ID, correlationID, time.Now().Add(d))
}

// Poll takes the oldest undelivered messages of the channel (at most
// limit) and marks them delivered in the same statement; with none it waits
// up to wait for one: a put through this replica wakes it at once, one
// through another replica is seen by the next database poll
// (PollInterval). It returns no messages and no error when ctx ends first
// (the caller left; a cancelled statement takes nothing). The caller
// answers them, or gives them back with Release.
func (a *Outbox) Poll(ctx context.Context, projectID, channelID string, wait time.Duration, limit int) ([]wire.OutboxMessage, error) {
	interval := a.PollInterval
	if interval <= 0 {
		interval = DefaultPollInterval
	}
	k := key(projectID, channelID)
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		woken := a.wakeup(k) // before the take: a put after it wakes us
		rows, err := a.store.TakeOutbox(ctx, projectID, channelID, limit)
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil
			}
			return nil, wire.Unavailable(err)
		}
		if len(rows) > 0 {
			return messages(rows), nil
		}
		if wait <= 0 {
			return nil, nil
		}
		tick := time.NewTimer(interval)
		select {
		case <-woken:
		case <-tick.C:
		case <-deadline.C:
			tick.Stop()
			return nil, nil
		case <-ctx.Done():
			tick.Stop()
			return nil, nil
		}
		tick.Stop()
	}
}

func messages(rows []store.OutboxMessage) []wire.OutboxMessage {
	msgs := make([]wire.OutboxMessage, len(rows))
	for i, r := range rows {
		msgs[i] = wire.OutboxMessage{ID: r.ID, OutboxReply: wire.OutboxReply{CorrelationID: r.CorrelationID, Reply: r.Reply,
			Metadata: json.RawMessage(r.Metadata), CreatedAt: r.CreatedAt.UTC(), Status: r.Status}}
		if !json.Valid(msgs[i].Metadata) {
			msgs[i].Metadata = json.RawMessage("{}")
		}
	}
	return msgs
}

// Release gives messages a poll took back to the next poll, when their
// answer could not reach the caller (bounded by 5 s, whatever ctx).
func (a *Outbox) Release(ctx context.Context, projectID string, msgs []wire.OutboxMessage) {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := a.store.ReleaseOutbox(rctx, projectID, ids); err != nil {
		a.log.Error("outbox messages taken but neither answered nor released", zap.String("projectId", projectID),
			zap.Strings("ids", ids), zap.Error(err))
	}
}
