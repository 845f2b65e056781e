package outbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/handover"
	"github.com/svc-dev/svc/podagent/internal/journal"
	"github.com/svc-dev/svc/shared/internalapi"
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
	// Journal keeps the messages not yet accepted by the API (its outbox
	// bucket, keyed by correlationId): the pod's one journal, which the
	// caller closes after the relay.
	Journal *journal.DB
	// Dir, when Journal is nil, is a directory for a journal of the relay's
	// own (journal.OpenState), closed by Close: for a relay that stands
	// alone.
	Dir    string
	Poster Poster
	Log    *zap.Logger
	// RetryMin and RetryMax bound the backoff between rounds of failed
	// POSTs (handover.Loop: exponential, capped, with jitter).
	RetryMin, RetryMax time.Duration
}

// Relay journals outbox messages on disk and forwards them to the API in
// the background; a message leaves the journal once the API accepted it (or
// refused it for good, which is logged as an error and moves the message to
// the journal's set-aside bucket, as outbox/rejected/<correlationId>, for an
// operator). Safe for concurrent use.
type Relay struct {
	o     RelayOptions
	log   *zap.Logger
	table journal.Table[wire.OutboxPut]
	owned *journal.DB // opened from Dir; closed by Close

	mu      sync.Mutex
	pending map[string]*entry // by correlation id
	loop    *handover.Loop

	cancel context.CancelFunc
	done   chan struct{}
	closed sync.Once
}

type entry struct {
	put       wire.OutboxPut
	journaled bool // false when the journal could not be written
}

// OpenRelay loads the journal left by an earlier run and starts forwarding.
// Call Close to stop.
func OpenRelay(o RelayOptions) (*Relay, error) {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	o.RetryMin = settings.PositiveOr(o.RetryMin, DefaultRetryMin)
	if o.RetryMax < o.RetryMin {
		o.RetryMax = max(DefaultRetryMax, o.RetryMin)
	}
	r := &Relay{o: o, log: o.Log.Named("outbox"), pending: map[string]*entry{}, done: make(chan struct{})}
	r.loop = handover.New(handover.Options{Drain: r.flush, RetryMin: o.RetryMin, RetryMax: o.RetryMax,
		Pending: r.Pending, What: "outbox messages", Log: r.log})
	if o.Journal == nil {
		if o.Dir == "" {
			return nil, errors.New("outbox: RelayOptions needs a Journal or a Dir")
		}
		db, err := journal.OpenState(o.Dir, journal.Options{Log: o.Log})
		if err != nil {
			return nil, err
		}
		r.o.Journal, r.owned = db, db
	}
	r.table = journal.TableOf[wire.OutboxPut](r.o.Journal, journal.Outbox)
	items, bad, err := r.table.Load(func(key string, put wire.OutboxPut) bool { return put.CorrelationID == key })
	if err != nil {
		r.closeOwned()
		return nil, fmt.Errorf("outbox: %w", err)
	}
	for _, k := range bad {
		r.log.Error("unreadable outbox journal entry; set aside in the journal", zap.String("key", k))
	}
	for _, it := range items {
		r.pending[it.Key] = &entry{put: it.Value, journaled: true}
	}
	if n := len(r.pending); n > 0 {
		r.log.Info("outbox messages from an earlier run will be sent to the API", zap.Int("pending", n))
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go r.run(ctx)
	return r, nil
}

// Put journals the message (on disk before it returns) and has it sent to
// the API. If the journal cannot be written the message is still sent from
// memory (a restart before it is accepted would lose it; logged).
func (r *Relay) Put(channelID string, m wire.OutboxMessage) {
	put := wire.OutboxPut{ChannelID: channelID, OutboxReply: m.OutboxReply}
	put.CreatedAt = put.CreatedAt.UTC()
	r.mu.Lock()
	if _, ok := r.pending[put.CorrelationID]; !ok {
		e := &entry{put: put}
		if err := r.table.Put(put.CorrelationID, put); err != nil {
			r.log.Error("writing the outbox journal failed; the message is kept in memory only until the API takes it",
				zap.String("correlationId", put.CorrelationID), zap.Error(err))
		} else {
			e.journaled = true
		}
		r.pending[put.CorrelationID] = e
	}
	r.mu.Unlock()
	r.loop.Wake()
}

// PutWith is Put whose journal write carries also in the same transaction
// (the removal of the accepted message whose reply this is: inbox.Journal.
// DoneWith). It fails when that transaction could not be written; the
// message is then still sent from memory, and also is not applied.
func (r *Relay) PutWith(channelID string, m wire.OutboxMessage, also ...journal.Op) (err error) {
	put := wire.OutboxPut{ChannelID: channelID, OutboxReply: m.OutboxReply}
	put.CreatedAt = put.CreatedAt.UTC()
	var elsewhere []journal.Op // a relay with a journal of its own (Dir)
	also = slices.DeleteFunc(also, func(op journal.Op) bool {
		if op.DB() != r.o.Journal {
			elsewhere = append(elsewhere, op)
			return true
		}
		return false
	})
	defer func() {
		for _, op := range elsewhere {
			if err == nil {
				err = op.DB().Apply(op)
			}
		}
	}()
	r.mu.Lock()
	if _, ok := r.pending[put.CorrelationID]; ok {
		err = r.o.Journal.Apply(also...)
	} else {
		e := &entry{put: put}
		var op journal.Op
		if op, err = r.table.PutOp(put.CorrelationID, put); err == nil {
			err = r.o.Journal.Apply(append([]journal.Op{op}, also...)...)
		}
		if err != nil {
			r.log.Error("writing the outbox journal failed; the message is kept in memory only until the API takes it",
				zap.String("correlationId", put.CorrelationID), zap.Error(err))
		} else {
			e.journaled = true
		}
		r.pending[put.CorrelationID] = e
	}
	r.mu.Unlock()
	r.loop.Wake()
	return err
}

// Len is the number of messages of the channel the API has not accepted yet
// (delivery notices, Status delivered, are not counted).
func (r *Relay) Len(channelID string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.pending {
		if e.put.ChannelID == channelID && e.put.Status != wire.OutboxStatusDelivered {
			n++
		}
	}
	return n
}

// Pending is the number of messages not accepted yet, all channels.
func (r *Relay) Pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}

// Close stops the background loop, then makes one last attempt to hand
// every pending message to the API within ctx. What is still pending stays
// in the journal for the next start; the error says how many.
func (r *Relay) Close(ctx context.Context) error {
	var err error
	r.closed.Do(func() {
		r.cancel()
		<-r.done
		err = r.flush(ctx)
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

func (r *Relay) run(ctx context.Context) {
	defer close(r.done)
	r.loop.Run(ctx)
}

// flush posts every pending message, oldest first, and stops at the first
// failure that may pass (network, 5xx, 401 of a stale token...).
func (r *Relay) flush(ctx context.Context) error {
	for _, e := range r.snapshot() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		resp, err := r.o.Poster.PutOutbox(ctx, e.put)
		switch {
		case err == nil:
			r.log.Info("outbox message handed to the API", zap.String("correlationId", e.put.CorrelationID),
				zap.String("id", resp.ID), zap.Bool("created", resp.Created))
			r.drop(e, "")
		case internalapi.Permanent(err):
			r.log.Error("the API refused an outbox message for good; set aside in the journal",
				zap.String("correlationId", e.put.CorrelationID), zap.Error(err))
			r.drop(e, "rejected")
		default:
			return err
		}
	}
	return nil
}

func (r *Relay) snapshot() []*entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*entry, 0, len(r.pending))
	for _, e := range r.pending {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].put.CreatedAt.Equal(out[j].put.CreatedAt) {
			return out[i].put.CreatedAt.Before(out[j].put.CreatedAt)
		}
		return out[i].put.CorrelationID < out[j].put.CorrelationID
	})
	return out
}

// drop forgets an entry: it leaves the journal, or is set aside there
// under reason.
func (r *Relay) drop(e *entry, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending[e.put.CorrelationID] == e {
		delete(r.pending, e.put.CorrelationID)
	}
	if !e.journaled {
		return
	}
	var err error
	if reason == "" {
		err = r.table.Delete(e.put.CorrelationID)
	} else {
		err = r.table.SetAside(e.put.CorrelationID, reason)
	}
	if err != nil {
		// A leftover entry is sent again after a restart; the API's
		// idempotency on the correlation id makes that harmless.
		r.log.Warn("removing an outbox journal entry failed", zap.String("correlationId", e.put.CorrelationID), zap.Error(err))
	}
}
