package metering

import (
	"context"
	"sync"
	"time"
)

// Deferred leased settlements (docs/gateway.md, "Budgets per API key"): a
// request admitted from this replica's budget lease whose cost the block
// covers moves credits from the key's lease to its used credits; leased
// credits already count as spent for every other replica and for every
// reservation, so that move changes nothing any admission reads. Such
// settlements are therefore summed per key and window in memory and
// written together, one statement per key, at most SettleDelay after the
// first of them, instead of one statement per request on the request's
// path. Everything that can change what another replica may admit is still
// written at once: a cost beyond what the block had left, a settlement of a
// block whose window ended, per-request reservations and settlements during
// an outage. What the delay costs: usedMicro as the API shows it trails the
// replica's settled requests by up to SettleDelay, and a replica that dies
// loses at most SettleDelay of its covered costs from the key's counter
// (its unreturned lease lapses as before).

// LeasedSettleDelay is the server's SettleDelay.
const LeasedSettleDelay = 100 * time.Millisecond

// deferKey is one key's deferred settlements of one lease window and one
// daily and monthly window (those write as one statement).
type deferKey struct {
	keyID                string
	resetsAt, day, month int64
}

// deferredSettlements are a Meter's covered leased settlements waiting to
// be written.
type deferredSettlements struct {
	mu      sync.Mutex
	pending map[deferKey]settlement
	timer   *time.Timer
	writing sync.WaitGroup // flushes of the timer in flight
}

// deferrable reports whether s, a leased settlement, may wait: its cost is
// all taken from the block (so the key's used + leased credits do not move).
func (m *Meter) deferrable(s settlement) bool {
	return m.SettleDelay > 0 && s.leased && !s.unreserved && s.release == s.cost && s.cost > 0
}

// deferSettlement adds s to its key's pending sum and arms the flush.
func (m *Meter) deferSettlement(s settlement) {
	d := &m.deferred
	k := deferKey{keyID: s.keyID, resetsAt: s.resetsAt, day: s.clock.Day, month: s.clock.Month}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pending == nil {
		d.pending = map[deferKey]settlement{}
	}
	if p, ok := d.pending[k]; ok {
		p.cost += s.cost
		p.release += s.release
		p.maxCost = max(p.maxCost, s.largest())
		d.pending[k] = p
	} else {
		s.maxCost = s.largest()
		d.pending[k] = s
	}
	if d.timer == nil {
		d.writing.Add(1)
		d.timer = time.AfterFunc(m.SettleDelay, func() {
			defer d.writing.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			m.FlushSettlements(ctx)
		})
	}
}

// FlushSettlements writes the deferred settlements now (the flush timer,
// lease returns and Close call it); one the database refuses is kept and
// retried with the next admission, as any settlement.
func (m *Meter) FlushSettlements(ctx context.Context) {
	d := &m.deferred
	d.mu.Lock()
	pending := d.pending
	d.pending = nil
	if d.timer != nil && d.timer.Stop() {
		d.writing.Done() // the timer will not run
	}
	d.timer = nil
	d.mu.Unlock()
	for _, s := range pending {
		if err := m.settle(ctx, s); err != nil {
			m.keepSettlement(s)
		}
	}
}
