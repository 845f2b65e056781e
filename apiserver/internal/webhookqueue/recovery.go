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
// attempt recorded in the log. A replay runs in the background on the
// replica that took the call; one at a time per project.

// DefaultReplayMax bounds the messages of one replay call.
const DefaultReplayMax = 1000

// RecoveryStore is what a replay needs (store.Store).
type RecoveryStore interface {
	ListReplayable(ctx context.Context, projectID, channelID string, since, until time.Time, state string, limit int) ([]store.OutboxMessage, error)
	LastDeliveryAttempt(ctx context.Context, projectID, correlationID string) (store.WebhookAttempt, error)
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

	mu      sync.Mutex
	running map[string]bool
	wg      sync.WaitGroup
}

// NewRecovery returns the replayer (sharing the queue's sender and throttle).
func NewRecovery(st RecoveryStore, sender *webhooksend.Sender, throttle *Throttle, wl *webhooklog.Log, log *zap.Logger) *Recovery {
	if log == nil {
		log = zap.NewNop()
	}
	return &Recovery{store: st, sender: sender, throttle: throttle, wlog: wl, log: log, running: map[string]bool{}}
}

var (
	errReplayRange = func(msg string) error { return wire.Coded(wire.CodeInvalidReplayRange, msg) }
	errReplaying   = wire.Coded(wire.CodeReplayInProgress, "A replay of this channel is running; retry after it ends.")
)

type replayItem struct {
	m   store.OutboxMessage
	url string
	id  string
}

// Start checks the range, picks the messages and starts their replay; the
// answer says how many. ch is the project's channel (its secret and keys
// sign).
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
	rows, err := r.store.ListReplayable(ctx, projectID, ch.ID, rr.Since, rr.Until, rr.Status, max+1)
	if err != nil {
		return wire.WebhookReplayStarted{}, wire.Unavailable(err)
	}
	var out wire.WebhookReplayStarted
	if len(rows) > max {
		rows, out.Truncated = rows[:max], true
	}
	var items []replayItem
	for _, m := range rows {
		out.Last = m.CreatedAt.UTC()
		it := replayItem{m: m, url: m.CallbackURL, id: m.WebhookID}
		if it.url == "" {
			last, err := r.store.LastDeliveryAttempt(ctx, projectID, m.CorrelationID)
			if errors.Is(err, store.ErrNotFound) || (err == nil && last.URL == "") {
				out.Skipped++
				continue
			}
			if err != nil {
				return wire.WebhookReplayStarted{}, wire.Unavailable(err)
			}
			it.url, it.id = last.URL, last.WebhookID
		}
		items = append(items, it)
	}
	out.Messages = len(items)
	r.mu.Lock()
	if r.running[projectID] {
		r.mu.Unlock()
		return wire.WebhookReplayStarted{}, errReplaying
	}
	r.running[projectID] = true
	r.wg.Add(1)
	r.mu.Unlock()
	go r.run(context.WithoutCancel(ctx), projectID, ch, items)
	r.log.Info("webhook replay started", zap.String("projectId", projectID), zap.Int("messages", out.Messages),
		zap.Int("skipped", out.Skipped), zap.Bool("truncated", out.Truncated))
	return out, nil
}

// Wait waits for every replay running.
func (r *Recovery) Wait() { r.wg.Wait() }

// Running reports whether a replay of the project runs.
func (r *Recovery) Running(projectID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.running[projectID]
}

func (r *Recovery) run(ctx context.Context, projectID string, ch store.Channel, items []replayItem) {
	defer r.wg.Done()
	defer func() {
		r.mu.Lock()
		delete(r.running, projectID)
		r.mu.Unlock()
	}()
	headers, _ := webhookchannel.DecodeCallbackHeaders(ch.CallbackHeaders)
	var wg sync.WaitGroup
	delivered := 0
	var mu sync.Mutex
	for _, it := range items {
		meta := json.RawMessage(it.m.Metadata)
		if !json.Valid(meta) {
			meta = json.RawMessage("{}")
		}
		body, err := webhooksend.CallbackBody(wire.WebhookCallback{Reply: it.m.Reply, CorrelationID: it.m.CorrelationID, Metadata: meta})
		if err != nil {
			continue
		}
		del := webhooksend.Delivery{URL: it.url, MsgID: it.id, Secret: ch.Secret, OldSecrets: ch.PreviousSecrets(time.Now()),
			SigningKey: ch.SigningKey, CorrelationID: it.m.CorrelationID, ChannelID: ch.ID, Kind: wire.AttemptReplay,
			Headers: headers, Body: body}
		done, err := r.throttle.Acquire(ctx, wire.WebhookEndpoint(it.url))
		if err != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := r.sender.Attempt(ctx, del)
			done(a.Status)
			outcome := wire.AttemptDelivered
			if a.Err != nil {
				outcome = wire.AttemptFailed
			} else {
				mu.Lock()
				delivered++
				mu.Unlock()
			}
			if _, err := r.wlog.Record(ctx, projectID, []wire.WebhookAttempt{webhooksend.Record(del, 1, a, outcome, 0)}); err != nil {
				r.log.Warn("recording a replay attempt failed", zap.String("projectId", projectID), zap.Error(err))
			}
		}()
	}
	wg.Wait()
	r.log.Info("webhook replay done", zap.String("projectId", projectID), zap.Int("messages", len(items)), zap.Int("delivered", delivered))
}
