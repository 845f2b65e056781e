package webhooklog

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/wire"
)

// Errors of Replay and Test (coded, the one vocabulary of shared/wire).
var (
	errMessageNotFound = wire.Coded("message_not_found", "No message with this correlationId on this channel.")
	errNotReplayable   = wire.Coded("message_not_replayable",
		"Only a delivered or outboxed reply can be re-sent; this message has no reply yet.")
	errNoCallbackURL = wire.Coded("no_callback_url",
		"The attempt log knows no callback URL for this message (a sync reply, or its attempts are past the retention).")
)

// GetPod returns the project's pod client when a send needs it (after the
// request was checked).
type GetPod func(ctx context.Context) (*internalapi.PodClient, error)

// Replay re-sends a delivered or outboxed reply to its callback URL through
// the project's pod (one attempt: the same webhook-id, a new timestamp and
// signature) and records the attempt before it returns.
func (l *Log) Replay(ctx context.Context, pod GetPod, projectID string, ch store.Channel, correlationID string) (wire.WebhookAttempt, error) {
	m, err := l.Store.GetOutboxMessage(ctx, projectID, correlationID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && m.ChannelID != ch.ID) {
		return wire.WebhookAttempt{}, errMessageNotFound
	}
	if err != nil {
		return wire.WebhookAttempt{}, err
	}
	if !replayableState(store.MessageState(m, l.now())) {
		return wire.WebhookAttempt{}, errNotReplayable
	}
	rows, err := l.Store.ListWebhookAttempts(ctx, projectID, correlationID, nil, 1)
	if err != nil {
		return wire.WebhookAttempt{}, err
	}
	if len(rows) == 0 || rows[0].URL == "" {
		return wire.WebhookAttempt{}, errNoCallbackURL
	}
	meta := json.RawMessage(m.Metadata)
	if !json.Valid(meta) {
		meta = json.RawMessage("{}")
	}
	pc, err := pod(ctx)
	if err != nil {
		return wire.WebhookAttempt{}, err
	}
	a, err := pc.WebhookReplay(ctx, ch.Secret, wire.WebhookReplay{CorrelationID: correlationID, CallbackURL: rows[0].URL,
		Reply: m.Reply, Metadata: meta})
	if err != nil {
		return a, err
	}
	return a, l.recordOne(ctx, projectID, a)
}

// Test sends a test message to a callback URL through the project's pod
// and records the attempt: a 2xx re-enables a failing endpoint.
func (l *Log) Test(ctx context.Context, pod GetPod, projectID string, ch store.Channel, callbackURL string) (wire.WebhookAttempt, error) {
	pc, err := pod(ctx)
	if err != nil {
		return wire.WebhookAttempt{}, err
	}
	a, err := pc.WebhookTestCallback(ctx, ch.Secret, wire.WebhookTestCallback{CallbackURL: callbackURL})
	if err != nil {
		return a, err
	}
	return a, l.recordOne(ctx, projectID, a)
}

// recordOne stores the pod's answer at once (the pod's own record of it,
// arriving later, is the same id and stores nothing).
func (l *Log) recordOne(ctx context.Context, projectID string, a wire.WebhookAttempt) error {
	if a.ID == "" {
		return nil
	}
	_, err := l.Record(context.WithoutCancel(ctx), projectID, []wire.WebhookAttempt{a})
	return err
}
