package metering

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
)

// Budget leases (docs/gateway.md, "Budgets per API key"), in the spirit of
// the rate-permit leases (leases.go): a replica leases a block of a key's
// budget in one conditional UPDATE (store.LeaseKeyBudget), which counts the
// block as spent for every other replica, and admits the key's requests
// from it without a database round trip, each reserving the key's
// reservation estimate (the largest cost one request has had) from the
// block. Costs are settled against the block and written to the database
// with the key's settlement batching (settle_batch.go); what the block has
// left goes back when it idles (BudgetLeaseIdle), when its window ends, and
// on Close.
//
// The guarantee: the credits spent, the leases of every replica and the
// reservations in flight never exceed the limit when a lease or a request
// is admitted, so all replicas together pass the limit only as far as the
// per-request reservation allows (one request when nothing else is in
// flight, plus what requests cost beyond the estimate they were admitted
// with). A block is at most min(BudgetLeaseCap, left / budgetLeaseShare) of
// what is left; when that is less than two requests' estimate, or the
// key's estimate is not known yet, the request reserves in the database
// as without leases, so the end of a budget is admitted exactly as before.

// Budget lease defaults.
const (
	// BudgetLeaseIdle is how long a block may go unused before what it
	// has left goes back.
	BudgetLeaseIdle = 2 * time.Second
	// BudgetLeaseCap is the largest block one lease takes (100 credits).
	BudgetLeaseCap = 100_000_000
	// budgetLeaseUse is how long after its lease a block admits requests;
	// far less than ReservationTTL, after which an unreturned lease lapses
	// (a crashed replica's), so every request admitted from a block
	// settles while its lease holds.
	budgetLeaseUse = 30 * time.Second
	// budgetLeaseShare: a block is at most this share of what is left, so
	// several replicas near the end of a budget each get some of it.
	budgetLeaseShare = 4
)

// budgetBlock is one key's lease on this replica.
type budgetBlock struct {
	leased   int64 // credits leased in the database still this replica's (not yet settled or returned)
	reserved int64 // estimates of the requests in flight from the block
	estimate int64 // the reservation estimate of the key
	resetsAt int64 // the end of the window the lease belongs to (0: lifetime)
	until    time.Time
	lastUse  time.Time
	inflight int
}

// budgetLeases is a Meter's blocks per key.
type budgetLeases struct {
	mu      sync.Mutex
	m       map[string]*budgetBlock
	known   map[string]store.KeyBudget // each key's row as last read
	leasing map[string]bool
	ended   *sync.Cond
	timer   *time.Timer
	// returning is held by each return of blocks (the idle timer's and
	// ReturnLeases) until its writes are done, so that ReturnLeases ends
	// only after an idle return that took blocks before it.
	returning sync.Mutex
}

// leasedAdmission is how a request was admitted from a block: the
// estimate it reserved.
type leasedAdmission struct {
	estimate int64
	resetsAt int64 // the window of the block
}

// usable reports whether b may admit a request of estimate at now.
func (b *budgetBlock) usable(now time.Time) bool {
	if now.After(b.until) {
		return false
	}
	return b.resetsAt == 0 || now.UnixMilli() < b.resetsAt
}

// takeOrLease reserves an estimate from keyID's block, or makes the caller
// this replica's one leaser of the key (false, true: the caller leases or
// reserves in the database, then calls endLease). false, false: no block
// and no lease is worth trying (the caller reserves in the database).
func (l *budgetLeases) takeOrLease(keyID string, now time.Time) (adm leasedAdmission, ok, lease bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		if b := l.m[keyID]; b != nil && b.usable(now) && b.estimate > 0 && b.leased-b.reserved >= b.estimate {
			b.reserved += b.estimate
			b.inflight++
			b.lastUse = now
			return leasedAdmission{estimate: b.estimate, resetsAt: b.resetsAt}, true, false
		}
		if !l.leasing[keyID] {
			if l.leasing == nil {
				l.leasing = map[string]bool{}
			}
			l.leasing[keyID] = true
			return leasedAdmission{}, false, true
		}
		if l.ended == nil {
			l.ended = sync.NewCond(&l.mu)
		}
		l.ended.Wait()
	}
}

// endLease ends the caller's lease of keyID.
func (l *budgetLeases) endLease(keyID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.leasing, keyID)
	if l.ended != nil {
		l.ended.Broadcast()
	}
}

// blockSize is the block to lease for a key whose row reads b at now
// (0: too little is left for a lease worth having).
func blockSize(b store.KeyBudget, now time.Time) int64 {
	est := b.MaxRequestMicro
	if est <= 0 {
		return 0
	}
	leased := b.LeasedMicro
	if b.LeasedUntil <= now.UnixMilli() {
		leased = 0
	}
	inflight := b.Inflight
	if b.ReservedUntil <= now.UnixMilli() {
		inflight = 0
	}
	left := b.LimitMicro - b.UsedMicro(now) - leased - inflight*est
	n := min(int64(BudgetLeaseCap), left/budgetLeaseShare)
	if n < 2*est {
		return 0
	}
	return n
}

// leaseBudget is the leaser's round trip: it leases a block for keyID from
// what the key's row last read, and admits this request from it. ok false:
// no lease was taken (nothing is known of the key, too little is left, or
// the database refused); the caller reserves in the database.
func (m *Meter) leaseBudget(ctx context.Context, keyID string, now time.Time) (leasedAdmission, bool, error) {
	l := &m.budgetLeases
	defer l.endLease(keyID)
	l.mu.Lock()
	known, ok := l.known[keyID]
	l.mu.Unlock()
	if !ok {
		return leasedAdmission{}, false, nil
	}
	n := blockSize(known, now)
	if n <= 0 {
		return leasedAdmission{}, false, nil
	}
	b, granted, err := m.Store.LeaseKeyBudget(ctx, keyID, n, budgetClock(now))
	if err != nil {
		return leasedAdmission{}, false, err
	}
	if b.KeyID != "" {
		m.sawKeyBudget(b, now)
	}
	if !granted {
		return leasedAdmission{}, false, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]*budgetBlock{}
	}
	blk := l.m[keyID]
	if blk == nil || blk.resetsAt != b.ResetsAt {
		// A block of a window that closed is gone with it (the database
		// no longer counts it); requests in flight from it settle into
		// the new window without releasing anything.
		blk = &budgetBlock{}
		l.m[keyID] = blk
	}
	blk.leased += n
	blk.resetsAt = b.ResetsAt
	blk.estimate = max(blk.estimate, b.MaxRequestMicro)
	blk.until = now.Add(budgetLeaseUse)
	blk.lastUse = now
	m.scheduleLeaseReturn()
	if blk.leased-blk.reserved < blk.estimate {
		return leasedAdmission{}, false, nil
	}
	blk.reserved += blk.estimate
	blk.inflight++
	return leasedAdmission{estimate: blk.estimate, resetsAt: blk.resetsAt}, true, nil
}

// sawKeyBudget remembers a key's row as read (leases and outage.go).
func (m *Meter) sawKeyBudget(b store.KeyBudget, now time.Time) {
	m.outage.sawBudget(b, now)
	l := &m.budgetLeases
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.known == nil || len(l.known) > 100_000 {
		l.known = map[string]store.KeyBudget{}
	}
	l.known[b.KeyID] = b
}

// settled adds a reserved request's settlement to the key's row as last
// read: its cost used, its reservation gone, the estimate at least its
// cost.
func (l *budgetLeases) settled(keyID string, cost int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b, ok := l.known[keyID]; ok {
		b.CreditsMicro += cost
		b.Inflight = max(b.Inflight-1, 0)
		b.MaxRequestMicro = max(b.MaxRequestMicro, cost)
		l.known[keyID] = b
	}
}

// settleLeased settles a request admitted from keyID's block: its
// reservation goes back to the block, its cost is taken from it, and the
// settlement to write is returned (the credits of the lease it used
// released in the database).
func (m *Meter) settleLeased(keyID string, la leasedAdmission, cost int64, now time.Time) settlement {
	l := &m.budgetLeases
	l.mu.Lock()
	defer l.mu.Unlock()
	s := settlement{keyID: keyID, cost: cost, clock: budgetClock(now), leased: true}
	b := l.m[keyID]
	if b == nil || b.resetsAt != la.resetsAt {
		return s // the block's window ended: the cost goes to the new one
	}
	b.reserved -= la.estimate
	b.inflight--
	b.lastUse = now
	b.estimate = max(b.estimate, cost)
	if b.resetsAt != 0 && now.UnixMilli() >= b.resetsAt {
		return s // the window (and its lease) ended: the cost goes to the new one
	}
	used := min(cost, max(b.leased, 0))
	b.leased -= used
	s.release, s.resetsAt = used, b.resetsAt
	return s
}

// scheduleLeaseReturn arms the idle return; l.mu is held.
func (m *Meter) scheduleLeaseReturn() {
	l := &m.budgetLeases
	if l.timer != nil || m.LeaseIdle < 0 {
		return
	}
	idle := m.leaseIdle()
	l.timer = time.AfterFunc(idle, func() {
		l.mu.Lock()
		l.timer = nil
		l.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if m.ReturnIdleLeases(ctx, m.Now()) {
			l.mu.Lock()
			m.scheduleLeaseReturn()
			l.mu.Unlock()
		}
	})
}

func (m *Meter) leaseIdle() time.Duration {
	if m.LeaseIdle > 0 {
		return m.LeaseIdle
	}
	return BudgetLeaseIdle
}

// ReturnIdleLeases gives back what the blocks unused for the idle time (or
// past their use, or their window) have left, when no request of theirs
// is in flight; more reports whether blocks remain.
func (m *Meter) ReturnIdleLeases(ctx context.Context, now time.Time) (more bool) {
	return m.returnLeases(ctx, now, false)
}

// ReturnLeases waits for the background reads of windows and leases of
// rate permits, and gives back what every budget block without a request in
// flight has left (shutdown); Close of the server calls it.
func (m *Meter) ReturnLeases(ctx context.Context) error {
	m.background.Wait() // bounded by their timeout
	m.FlushSettlements(ctx)
	m.deferred.writing.Wait()
	if m.returnLeases(ctx, m.Now(), true) {
		return errors.New("metering: budget leases with requests in flight were kept")
	}
	return nil
}

func (m *Meter) returnLeases(ctx context.Context, now time.Time, all bool) (more bool) {
	l := &m.budgetLeases
	l.returning.Lock()
	defer l.returning.Unlock()
	type ret struct {
		key      string
		n        int64
		resetsAt int64
	}
	var rets []ret
	l.mu.Lock()
	for k, b := range l.m {
		idle := all || now.Sub(b.lastUse) >= m.leaseIdle() || !b.usable(now)
		if !idle || b.inflight > 0 || l.leasing[k] {
			more = true
			continue
		}
		delete(l.m, k)
		if b.leased > 0 && (b.resetsAt == 0 || now.UnixMilli() < b.resetsAt) {
			rets = append(rets, ret{k, b.leased, b.resetsAt})
		}
	}
	l.mu.Unlock()
	if len(rets) > 0 {
		m.FlushSettlements(ctx) // the blocks' deferred settlements before what they have left
	}
	for _, r := range rets {
		s := settlement{keyID: r.key, clock: budgetClock(now), leased: true, release: r.n, resetsAt: r.resetsAt}
		if err := m.settle(ctx, s); err != nil {
			m.keepSettlement(s)
		}
	}
	return more
}
