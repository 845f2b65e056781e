// Package outbox holds the webhook channel's outbound messages that could
// not be given inline or by callback (docs/design.md §6): replies of sync
// requests that timed out (504 reply_timeout) and async replies whose
// callback gave up.
//
// In production the durable place is the API's database: a Relay keeps each
// message in an on-disk journal until the API has accepted it
// (POST /internal/projects/{id}/outbox, idempotent on the correlation id),
// retrying in the background with backoff, also after a restart; the API
// serves the integrations' long-poll GET .../outbox/{channelId} from the
// database, so it works with the pod down.
//
// Outbox is the in-memory variant for a pod without an API (and tests): a
// poll of the pod's own route returns the oldest pending messages and
// acknowledges (removes) them; a restart loses what was not fetched.
package outbox

import (
	"context"
	"sync"
	"time"

	"github.com/svc-dev/svc/shared/settings"
	"github.com/svc-dev/svc/shared/wire"
)

// Limits of a poll (docs/design.md §6).
const (
	MaxWait      = wire.OutboxMaxWait
	DefaultLimit = wire.OutboxDefaultLimit
	MaxLimit     = wire.OutboxMaxLimit
	// DefaultCapacity bounds the pending messages per channel; beyond it
	// the oldest is dropped (Dropped counts them).
	DefaultCapacity = 1000
)

// Outbox is safe for concurrent use. The zero value is not usable; call New.
type Outbox struct {
	mu       sync.Mutex
	pending  map[string][]wire.OutboxMessage
	wake     chan struct{} // closed and replaced on every Put
	capacity int
	dropped  int64
}

// New returns an empty outbox; capacity <= 0 means DefaultCapacity.
func New(capacity int) *Outbox {
	capacity = settings.PositiveOr(capacity, DefaultCapacity)
	return &Outbox{pending: map[string][]wire.OutboxMessage{}, wake: make(chan struct{}), capacity: capacity}
}

// Put appends m to the channel's pending messages and wakes pollers.
func (o *Outbox) Put(channelID string, m wire.OutboxMessage) {
	if m.Status == wire.OutboxStatusDelivered {
		return // a delivery notice is for the API's record; nothing to serve
	}
	m.Continue = nil // for the API's queue only; a poll never sees it
	o.mu.Lock()
	q := append(o.pending[channelID], m)
	if len(q) > o.capacity {
		o.dropped += int64(len(q) - o.capacity)
		q = append([]wire.OutboxMessage(nil), q[len(q)-o.capacity:]...)
	}
	o.pending[channelID] = q
	close(o.wake)
	o.wake = make(chan struct{})
	o.mu.Unlock()
}

// Requeue puts messages back at the front (a poll whose answer could not
// be written), keeping their order.
func (o *Outbox) Requeue(channelID string, ms []wire.OutboxMessage) {
	if len(ms) == 0 {
		return
	}
	o.mu.Lock()
	o.pending[channelID] = append(append([]wire.OutboxMessage(nil), ms...), o.pending[channelID]...)
	close(o.wake)
	o.wake = make(chan struct{})
	o.mu.Unlock()
}

// Take removes and returns up to limit of the oldest pending messages of
// the channel. When none is pending it waits up to wait (capped at MaxWait)
// for one, or until ctx ends; it then returns an empty, non-nil slice.
func (o *Outbox) Take(ctx context.Context, channelID string, limit int, wait time.Duration) []wire.OutboxMessage {
	limit = settings.PositiveOr(limit, DefaultLimit)
	limit = min(limit, MaxLimit)
	wait = min(wait, MaxWait)
	var timer <-chan time.Time
	for {
		o.mu.Lock()
		q := o.pending[channelID]
		if len(q) > 0 {
			n := min(limit, len(q))
			out := append([]wire.OutboxMessage(nil), q[:n]...)
			if n == len(q) {
				delete(o.pending, channelID)
			} else {
				o.pending[channelID] = q[n:]
			}
			o.mu.Unlock()
			return out
		}
		wake := o.wake
		o.mu.Unlock()
		if wait <= 0 {
			return []wire.OutboxMessage{}
		}
		if timer == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			timer = t.C
		}
		select {
		case <-wake:
		case <-timer:
			return []wire.OutboxMessage{}
		case <-ctx.Done():
			return []wire.OutboxMessage{}
		}
	}
}

// Len is the number of pending messages of the channel.
func (o *Outbox) Len(channelID string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.pending[channelID])
}

// Dropped is the number of messages dropped because a channel was full.
func (o *Outbox) Dropped() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.dropped
}
