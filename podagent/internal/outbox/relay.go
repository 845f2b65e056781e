package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/handover"
	"github.com/svc-dev/svc/podagent/internal/journal"
	"github.com/svc-dev/svc/shared/settings"
	"github.com/svc-dev/svc/shared/wire"
)

// Poster hands one message to the API (*internalapi.Client; tests
// substitute it).
type Poster interface {
	PutOutbox(ctx context.Context, m wire.OutboxPut) (wire.OutboxPutResponse, error)
}

// Relay defaults (the hand-over loop's).
const (
	DefaultRetryMin = handover.DefaultRetryMin
	DefaultRetryMax = handover.DefaultRetryMax
)

// RelayOptions configure OpenRelay.
type RelayOptions struct {
	// Queue is the pod's hand-over queue: the messages not yet accepted by
	// the API are its outbox kind (in the journal, by correlationId).
	Queue *handover.Queue
	// Journal, when Queue is nil, is the journal of a queue of the relay's
	// own (its caller closes the journal after the relay); Dir, when both
	// are nil, a directory for a journal of the relay's own too
	// (journal.OpenState). Both are closed by Close: for a relay that
	// stands alone.
	Journal *journal.DB
	Dir     string
	Poster  Poster
	Log     *zap.Logger
	// RetryMin and RetryMax bound the backoff of a queue of the relay's
	// own (handover.Loop: exponential, capped, with jitter).
	RetryMin, RetryMax time.Duration
}

// Relay is the outbox kind of the hand-over queue: it journals outbox
// messages on disk and has the queue's loop forward them to the API; a
// message leaves the journal once the API accepted it (or refused it for
// good, which is logged as an error and moves the message to the journal's
// set-aside bucket, as outbox/rejected/<correlationId>, for an operator).
// Safe for concurrent use.
type Relay struct {
	o     RelayOptions
	log   *zap.Logger
	q     *handover.Queue
	db    *journal.DB
	owned *journal.DB // opened from Dir; closed by Close
	ownQ  bool

	closed sync.Once
}

// OpenRelay registers the outbox kind of the queue (messages an earlier run
// left in the journal are sent by it). Call Close to stop.
func OpenRelay(o RelayOptions) (*Relay, error) {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	o.RetryMin = settings.PositiveOr(o.RetryMin, DefaultRetryMin)
	if o.RetryMax < o.RetryMin {
		o.RetryMax = max(DefaultRetryMax, o.RetryMin)
	}
	r := &Relay{o: o, log: o.Log.Named("outbox"), q: o.Queue, db: o.Journal}
	if r.q == nil {
		if r.db == nil {
			if o.Dir == "" {
				return nil, errors.New("outbox: RelayOptions needs a Queue, a Journal or a Dir")
			}
			db, err := journal.OpenState(o.Dir, journal.Options{Log: o.Log})
			if err != nil {
				return nil, err
			}
			r.db, r.owned = db, db
		}
		q, err := handover.OpenQueue(r.db, handover.QueueOptions{RetryMin: o.RetryMin, RetryMax: o.RetryMax, Log: o.Log})
		if err != nil {
			r.closeOwned()
			return nil, fmt.Errorf("outbox: %w", err)
		}
		r.q, r.ownQ = q, true
	}
	r.q.Handle(handover.Outbox, handover.Handler{What: "outbox message", Send: r.send})
	if r.ownQ {
		r.q.Start()
	}
	return r, nil
}

// Put journals the message (on disk before it returns) and has it sent to
// the API. If the journal cannot be written the message is still sent from
// memory (a restart before it is accepted would lose it; logged).
func (r *Relay) Put(channelID string, m wire.OutboxMessage) {
	put := wire.OutboxPut{ChannelID: channelID, OutboxReply: m.OutboxReply}
	put.CreatedAt = put.CreatedAt.UTC()
	_ = r.q.Put(handover.Outbox, put.CorrelationID, put, false)
}

// PutWith is Put whose journal write carries also in the same transaction
// (the removal of the accepted message whose reply this is: inbox.Journal.
// DoneWith). It fails when that transaction could not be written; the
// message is then still sent from memory, and also is not applied.
func (r *Relay) PutWith(channelID string, m wire.OutboxMessage, also ...journal.Op) (err error) {
	put := wire.OutboxPut{ChannelID: channelID, OutboxReply: m.OutboxReply}
	put.CreatedAt = put.CreatedAt.UTC()
	var elsewhere []journal.Op // ops of another journal than the queue's (a relay with one of its own)
	also = slices.DeleteFunc(also, func(op journal.Op) bool {
		if op.DB() != r.queueDB() {
			elsewhere = append(elsewhere, op)
			return true
		}
		return false
	})
	if err = r.q.PutWith(handover.Outbox, put.CorrelationID, put, false, also...); err != nil {
		return err
	}
	for _, op := range elsewhere {
		if err == nil {
			err = op.DB().Apply(op)
		}
	}
	return err
}

func (r *Relay) queueDB() *journal.DB { return r.q.DB() }

// Len is the number of messages of the channel the API has not accepted yet
// (delivery notices, Status delivered, are not counted).
func (r *Relay) Len(channelID string) int {
	n := 0
	for _, e := range r.q.Entries(handover.Outbox) {
		var put wire.OutboxPut
		if json.Unmarshal(e.Payload, &put) == nil && put.ChannelID == channelID && put.Status != wire.OutboxStatusDelivered {
			n++
		}
	}
	return n
}

// Pending is the number of messages not accepted yet, all channels.
func (r *Relay) Pending() int { return r.q.Len(handover.Outbox) }

// Close makes one last attempt to hand every pending message to the API
// within ctx (and stops a queue of the relay's own). What is still pending
// stays in the journal for the next start; the error says why.
func (r *Relay) Close(ctx context.Context) error {
	var err error
	r.closed.Do(func() {
		if r.ownQ {
			err = r.q.Close(ctx)
		} else {
			err = r.q.Drain(ctx, handover.Outbox)
		}
		if n := r.Pending(); n > 0 {
			r.log.Warn("outbox messages not accepted by the API yet stay in the journal for the next start",
				zap.Int("pending", n), zap.Error(err))
		}
		r.closeOwned()
	})
	return err
}

func (r *Relay) closeOwned() {
	if r.owned != nil {
		_ = r.owned.Close()
	}
}

// send posts one message (the queue's handler).
func (r *Relay) send(ctx context.Context, batch []handover.Entry) error {
	for _, e := range batch {
		var put wire.OutboxPut
		if err := json.Unmarshal(e.Payload, &put); err != nil {
			r.log.Error("unreadable outbox message in the journal; dropped", zap.String("correlationId", e.ID), zap.Error(err))
			continue
		}
		resp, err := r.o.Poster.PutOutbox(ctx, put)
		if err != nil {
			return err
		}
		r.log.Info("outbox message handed to the API", zap.String("correlationId", put.CorrelationID),
			zap.String("id", resp.ID), zap.Bool("created", resp.Created))
	}
	return nil
}
