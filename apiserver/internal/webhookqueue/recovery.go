package webhookqueue

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/webhookchannel"
	"github.com/svc-dev/svc/apiserver/internal/webhooklog"
	"github.com/svc-dev/svc/shared/webhooksend"
	"github.com/svc-dev/svc/shared/wire"
)

// Recovery (docs/webhook-delivery.md "Recovery"): one call replays every
// reply of a channel in a time range and/or with a given final state —
// one attempt each (kind replay, the same webhook-id, a new timestamp and
// signature), sent by the API through the per-endpoint Throttle, each
// attempt recorded in the log. The call marks the messages in the database
// (store.MarkReplays); every replica's Run claims marked messages with a
// lease and sends them, so a replica stopped mid-replay leaves the rest to
// the others. One replay at a time per project.

// DefaultReplayMax bounds the messages of one replay call.
const DefaultReplayMax = 1000

// replayBatch is how many marked messages one claim takes.
const replayBatch = 16

// RecoveryStore is what a replay needs (store.Store).
type RecoveryStore interface {
	ListReplayable(ctx context.Context, projectID, channelID string, since, until time.Time, state string, limit int) ([]store.OutboxMessage, error)
	LastDeliveryAttempt(ctx context.Context, projectID, correlationID string) (store.WebhookAttempt, error)
	MarkReplays(ctx context.Context, ms []store.ReplayMark, at time.Time) error
	ReplayPending(ctx context.Context, projectID string) (int64, error)
	ClaimReplays(ctx context.Context, owner string, now, leaseUntil time.Time, limit int) ([]store.OutboxMessage, error)
	FinishReplay(ctx context.Context, id, owner string) error
	GetChannel(ctx context.Context, projectID string) (store.Channel, error)
}

// Recovery runs range replays.
type Recovery struct {
	store    RecoveryStore
	sender   *webhooksend.Sender
	throttle *Throttle
	wlog     *webhooklog.Log
	log      *zap.Logger
	// Max: DefaultReplayMax when zero.
	Max int
	// Owner names this replica's leases; Lease is how long a claimed
	// message is this replica's (an attempt's timeout + 30 s).
	Owner string
	Lease time.Duration

	mu   sync.Mutex // one drain at a time
	wake chan struct{}
}

// NewRecovery returns the replayer (sharing the queue's sender and throttle).
func NewRecovery(st RecoveryStore, sender *webhooksend.Sender, throttle *Throttle, wl *webhooklog.Log, log *zap.Logger) *Recovery {
	if log == nil {
		log = zap.NewNop()
	}
	return &Recovery{store: st, sender: sender, throttle: throttle, wlog: wl, log: log,
		Owner: store.NewID("rpl"), Lease: webhooksend.DefaultAttemptTimeout + leaseMargin, wake: make(chan struct{}, 1)}
}

var (
	errReplayRange = func(msg string) error { return wire.Coded(wire.CodeInvalidReplayRange, msg) }
	errReplaying   = wire.Coded(wire.CodeReplayInProgress, "A replay of this channel is running; retry after it ends.")
)

// Start checks the range, picks the messages and marks them for replay
// in the database; the answer says how many. ch is the project's channel.
func (r *Recovery) Start(ctx context.Context, projectID string, ch store.Channel, rr wire.WebhookReplayRange) (wire.WebhookReplayStarted, error) {
	switch rr.Status {
	case "", wire.MessageDelivered, wire.MessageInOutbox, wire.MessageFetched:
	default:
		return wire.WebhookReplayStarted{}, errReplayRange("status: delivered, in_outbox or taken_from_outbox (empty: any).")
	}
	if !rr.Since.IsZero() && !rr.Until.IsZero() && !rr.Until.After(rr.Since) {
		return wire.WebhookReplayStarted{}, errReplayRange("until must be after since.")
	}
	if ch.Secret == "" {
		return wire.WebhookReplayStarted{}, wire.Coded(wire.CodeNoCallbackURL, "The channel has no secret to sign with.")
	}
	max := r.Max
	if max <= 0 {
		max = DefaultReplayMax
	}
	if n, err := r.store.ReplayPending(ctx, projectID); err != nil {
		return wire.WebhookReplayStarted{}, wire.Unavailable(err)
	} else if n > 0 {
		return wire.WebhookReplayStarted{}, errReplaying
	}
	rows, err := r.store.ListReplayable(ctx, projectID, ch.ID, rr.Since, rr.Until, rr.Status, max+1)
	if err != nil {
		return wire.WebhookReplayStarted{}, wire.Unavailable(err)
	}
	var out wire.WebhookReplayStarted
	if len(rows) > max {
		rows, out.Truncated = rows[:max], true
	}
	var marks []store.ReplayMark
	for _, m := range rows {
		out.Last = m.CreatedAt.UTC()
		mk := store.ReplayMark{ID: m.ID, URL: m.CallbackURL, WebhookID: m.WebhookID}
		if mk.URL == "" {
			last, err := r.store.LastDeliveryAttempt(ctx, projectID, m.CorrelationID)
			if errors.Is(err, store.ErrNotFound) || (err == nil && last.URL == "") {
				out.Skipped++
				continue
			}
			if err != nil {
				return wire.WebhookReplayStarted{}, wire.Unavailable(err)
			}
			mk.URL, mk.WebhookID = last.URL, last.WebhookID
		}
		marks = append(marks, mk)
	}
	out.Messages = len(marks)
	if err := r.store.MarkReplays(ctx, marks, time.Now()); err != nil {
		return wire.WebhookReplayStarted{}, wire.Unavailable(err)
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
	r.log.Info("webhook replay started", zap.String("projectId", projectID), zap.Int("messages", out.Messages),
		zap.Int("skipped", out.Skipped), zap.Bool("truncated", out.Truncated))
	return out, nil
}

// Run sends the marked messages of every project, this replica's share,
// until ctx ends: at once after a Start on this replica, otherwise every
// pollInterval (the rest of a replica stopped mid-replay, once its leases
// ran out).
func (r *Recovery) Run(ctx context.Context, pollInterval time.Duration) {
	if pollInterval <= 0 {
		pollInterval = DefaultPollInterval
	}
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		r.Drain(ctx)
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-t.C:
		}
	}
}

// Wait sends every marked message this replica can claim now (tests, and
// an operator's one-off drain).
func (r *Recovery) Wait() { r.Drain(context.Background()) }

// Drain claims and sends marked messages until none is left to claim.
func (r *Recovery) Drain(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for ctx.Err() == nil {
		now := time.Now()
		rows, err := r.store.ClaimReplays(ctx, r.Owner, now, now.Add(r.Lease), replayBatch)
		if err != nil {
			r.log.Warn("claiming replays failed", zap.Error(err))
			return
		}
		if len(rows) == 0 {
			return
		}
		var wg sync.WaitGroup
		for _, m := range rows {
			ch, err := r.store.GetChannel(ctx, m.ProjectID)
			if err != nil || ch.ID != m.ChannelID || ch.Secret == "" {
				if err == nil || errors.Is(err, store.ErrNotFound) {
					r.finish(m) // no channel to sign with any more: nothing to send
				}
				continue
			}
			done, err := r.throttle.Acquire(ctx, wire.WebhookEndpoint(m.ReplayURL))
			if err != nil {
				wg.Wait()
				return // ctx ended: the lease runs out, another claim sends it
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.send(ctx, m, ch, done)
			}()
		}
		wg.Wait()
	}
}

// send makes a marked message's one replay attempt, records it and ends
// the mark.
func (r *Recovery) send(ctx context.Context, m store.OutboxMessage, ch store.Channel, done func(int)) {
	headers, _ := webhookchannel.DecodeCallbackHeaders(ch.CallbackHeaders)
	meta := json.RawMessage(m.Metadata)
	if !json.Valid(meta) {
		meta = json.RawMessage("{}")
	}
	body, err := webhooksend.CallbackBody(wire.WebhookCallback{Reply: m.Reply, CorrelationID: m.CorrelationID, Metadata: meta})
	if err != nil {
		done(0)
		r.finish(m)
		return
	}
	del := webhooksend.Delivery{URL: m.ReplayURL, MsgID: m.ReplayWebhookID, Secret: ch.Secret, OldSecrets: ch.PreviousSecrets(time.Now()),
		SigningKey: ch.SigningKey, CorrelationID: m.CorrelationID, ChannelID: ch.ID, Kind: wire.AttemptReplay,
		Headers: headers, Body: body}
	a := r.sender.Attempt(context.WithoutCancel(ctx), del)
	done(a.Status)
	outcome := wire.AttemptDelivered
	if a.Err != nil {
		outcome = wire.AttemptFailed
	}
	fctx := context.WithoutCancel(ctx)
	if _, err := r.wlog.Record(fctx, m.ProjectID, []wire.WebhookAttempt{webhooksend.Record(del, 1, a, outcome, 0)}); err != nil {
		r.log.Warn("recording a replay attempt failed", zap.String("projectId", m.ProjectID), zap.Error(err))
	}
	r.finish(m)
}

func (r *Recovery) finish(m store.OutboxMessage) {
	if err := r.store.FinishReplay(context.Background(), m.ID, r.Owner); err != nil {
		r.log.Warn("ending a replay failed; it may be sent again", zap.String("projectId", m.ProjectID), zap.Error(err))
	}
}
