package metering

import (
	"context"
	"sync"
)

// Settlements of one key in flight together are written as one statement
// (docs/gateway.md, "Budgets per API key"): while one settlement of a key
// is being written, the next ones wait in a batch, and the first of them
// writes the whole batch (n reservations released, their costs added) as
// soon as the write before it ends. Every caller still returns only once
// its own settlement is in the database (or failed), so a request's
// reservation is gone before its client has the answer, as before; what
// the batch saves is the row lock and round trip of each settlement after
// the first when a key's requests end together. (Settlements a budget lease
// covers reserve nothing in the database and do not come here per request:
// they are summed and written later, settle_defer.go.)

// settleBatches is the Meter's batching of reserved settlements per key.
type settleBatches struct {
	mu   sync.Mutex
	busy map[string]*settleBatch // key → the batch waiting for the write in flight (nil: none waits)
}

// settleBatch is the settlements of one key waiting for the write before
// them; the first one added writes it.
type settleBatch struct {
	s         settlement // the clock of the first; the costs of all
	n         int64
	maxCost   int64
	turn      chan struct{} // closed when the write before this batch ended
	done      chan struct{} // closed when this batch is written
	err       error
	joinDay   int64
	joinMonth int64
}

// settleReserved writes s (a reserved settlement), batched with other
// settlements of its key in flight together.
func (m *Meter) settleReserved(ctx context.Context, s settlement) error {
	bs := &m.batches
	bs.mu.Lock()
	if bs.busy == nil {
		bs.busy = map[string]*settleBatch{}
	}
	waiting, inFlight := bs.busy[s.keyID]
	if !inFlight {
		bs.busy[s.keyID] = nil // a write of this key is in flight: later ones wait
		bs.mu.Unlock()
		err := m.writeSettlements(ctx, s, 1, s.largest())
		m.handOff(s.keyID)
		return err
	}
	if waiting != nil && waiting.joinDay == s.clock.Day && waiting.joinMonth == s.clock.Month &&
		waiting.s.leased == s.leased && waiting.s.resetsAt == s.resetsAt {
		// Joins the waiting batch (same daily and monthly window).
		waiting.n++
		waiting.s.cost += s.cost
		waiting.s.release += s.release
		waiting.maxCost = max(waiting.maxCost, s.largest())
		bs.mu.Unlock()
		<-waiting.done
		return waiting.err
	}
	if waiting != nil {
		// Another window (the batch straddles a reset) or kind: written alone.
		bs.mu.Unlock()
		return m.writeSettlements(ctx, s, 1, s.largest())
	}
	b := &settleBatch{s: s, n: 1, maxCost: s.largest(), turn: make(chan struct{}), done: make(chan struct{}),
		joinDay: s.clock.Day, joinMonth: s.clock.Month}
	bs.busy[s.keyID] = b
	bs.mu.Unlock()
	<-b.turn
	b.err = m.writeSettlements(ctx, b.s, b.n, b.maxCost)
	close(b.done)
	m.handOff(s.keyID)
	return b.err
}

// handOff ends a write of key's settlements: the batch waiting for it, if
// any, writes next (and takes no more settlements); else the key is idle.
func (m *Meter) handOff(key string) {
	bs := &m.batches
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if b := bs.busy[key]; b != nil {
		bs.busy[key] = nil // b's write is now the one in flight
		close(b.turn)
		return
	}
	delete(bs.busy, key)
}

// writeSettlements writes n settlements of one kind summed in s (maxCost
// the largest cost): reserved ones release n reservations, leased ones
// (budget_lease.go) release s.release of the key's leases.
func (m *Meter) writeSettlements(ctx context.Context, s settlement, n, maxCost int64) error {
	if s.leased {
		return m.Store.SettleLeasedKeyBudget(ctx, s.keyID, s.cost, maxCost, s.release, s.resetsAt, s.clock)
	}
	return m.Store.SettleKeyBudgets(ctx, s.keyID, n, s.cost, maxCost, s.clock)
}
