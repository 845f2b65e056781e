package metering

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/auth"
	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/wire"
)

// Budgets per API key (docs/gateway.md, "Budgets per API
// key"): a key may carry a credit limit with its own window. Every request
// of such a key reserves against it before going upstream and settles after
// (its cost added, the reservation released), both single conditional
// statements on the key's budget row, so the guarantee holds across
// replicas: requests in flight together pass the limit by at most one
// request (the reservation estimate is the largest cost one request of the
// key has had; see store.ReserveKeyBudget).
// By default the reservation is taken from this replica's lease of the
// key's budget (budget_lease.go) with no round trip, and the per-request
// statement serves only where no lease is worth having (Meter.PerRequestBudget
// turns leases off).

// ReservationTTL is how long an unsettled reservation holds (a replica
// that died mid-request never settles); longer than any request may last.
const ReservationTTL = 15 * time.Minute

// budgetClock is the time as the budget statements need it.
func budgetClock(now time.Time) store.BudgetClock {
	u := now.UTC()
	day := time.Date(u.Year(), u.Month(), u.Day()+1, 0, 0, 0, 0, time.UTC)
	month := time.Date(u.Year(), u.Month()+1, 1, 0, 0, 0, 0, time.UTC)
	return store.BudgetClock{Now: u.UnixMilli(), Day: day.UnixMilli(), Month: month.UnixMilli(),
		Until: u.Add(ReservationTTL).UnixMilli()}
}

// reserveBudget reserves one request against p's key budget; reserved
// false when the key has none (nothing reserved). local: the database is
// down and the key's last known budget admitted the request (outage.go),
// without a reservation.
func (m *Meter) reserveBudget(ctx context.Context, p auth.Principal, now time.Time) (la leasedAdmission, reserved, local bool, err error) {
	if !m.PerRequestBudget {
		m.retrySettlements(ctx) // settlements kept through an outage first
		// From this replica's lease of the key's budget (budget_lease.go).
		la, ok, lease := m.budgetLeases.takeOrLease(p.KeyID, now)
		if ok {
			return la, true, false, nil
		}
		if lease {
			la, ok, err = m.leaseBudget(ctx, p.KeyID, now)
			if ok {
				return la, true, false, nil
			}
			if err != nil && ctx.Err() == nil && dbDown(ctx, err) {
				if err := m.budgetLocally(p, now, err); err != nil {
					return leasedAdmission{}, false, false, err
				}
				return leasedAdmission{}, false, true, nil
			}
		}
	}
	reserved, local, err = m.reserveOne(ctx, p, now)
	return leasedAdmission{}, reserved, local, err
}

// reserveOne reserves one request in the database (without leases, and
// where no lease is worth having).
func (m *Meter) reserveOne(ctx context.Context, p auth.Principal, now time.Time) (reserved, local bool, err error) {
	// Settlements kept through an outage first: their reservations would
	// otherwise refuse this one until they lapse.
	m.retrySettlements(ctx)
	b, ok, err := m.Store.ReserveKeyBudget(ctx, p.KeyID, budgetClock(now))
	if err == nil && b.KeyID != "" {
		m.sawKeyBudget(b, now) // what admission uses while the database is down, and leases
	}
	switch {
	case err != nil && ctx.Err() != nil:
		return false, false, wire.Internal(fmt.Errorf("metering: key budget: %w", err))
	case err != nil && dbDown(ctx, err):
		if err := m.budgetLocally(p, now, err); err != nil {
			return false, false, err
		}
		return false, true, nil
	case ok:
		return true, false, nil
	case b.KeyID == "":
		return false, false, nil // the budget was removed since authentication
	}
	if b.UsedMicro(now) >= b.LimitMicro {
		return false, false, KeyBudgetExceeded(b)
	}
	// What is left is reserved by this key's requests in flight.
	e := wire.Coded("key_budget_reserved",
		"What is left of this API key's budget is reserved by its requests in flight; retry when they end.")
	e.Headers = map[string]string{"Retry-After": "1"}
	return false, false, e
}

// KeyBudgetExceeded is the 402 of a key whose budget window is spent; a
// daily or monthly one says when it resets.
func KeyBudgetExceeded(b store.KeyBudget) *wire.Error {
	msg := fmt.Sprintf("This API key has used its %s budget.", b.BudgetWindow)
	if b.BudgetWindow == store.BudgetLifetime {
		msg += " Raise or remove the key's budget to continue."
	}
	e := wire.Coded("key_budget_exceeded", msg)
	if b.BudgetWindow != store.BudgetLifetime && b.ResetsAt > 0 {
		e.ResetsAt = time.UnixMilli(b.ResetsAt).UTC().Format(time.RFC3339)
	}
	return e
}

// Settle ends the key-budget reservation of an admitted request (adm from
// Admit): its cost, from u (nil: the upstream reported no usage, or the
// request failed), is added to the key's window. Every admitted request
// must be settled once; without a reservation Settle does nothing. A
// request admitted during a database outage (adm.Unreserved) only adds its
// cost. A settlement the database refuses is kept (up to maxUnsettled) and
// tried again before the next reservation or settlement, so an outage's
// spend reaches the key's counter when the database is back.
func (m *Meter) Settle(ctx context.Context, p auth.Principal, adm Admission, model catalog.Model, u *Usage) error {
	return m.settleRequest(ctx, false, p, adm, model, u)
}

// SettleTimeout bounds a settlement's own write (SettleDetached).
const SettleTimeout = 10 * time.Second

// SettleDetached is Settle for a request whose client may be gone: a
// write it makes runs on a context of its own (not cancelled with ctx,
// bounded by SettleTimeout). A settlement deferred to be written with the
// key's next ones, as most leased ones are, makes no context at all.
func (m *Meter) SettleDetached(ctx context.Context, p auth.Principal, adm Admission, model catalog.Model, u *Usage) error {
	return m.settleRequest(ctx, true, p, adm, model, u)
}

func (m *Meter) settleRequest(ctx context.Context, detached bool, p auth.Principal, adm Admission, model catalog.Model, u *Usage) error {
	if !adm.KeyBudget {
		return nil
	}
	var cost int64
	if u != nil {
		cost = model.CreditsMicroCached(u.PromptTokens, u.CachedTokens, u.CacheWriteTokens, u.CompletionTokens)
	}
	s := settlement{keyID: p.KeyID, cost: cost, clock: budgetClock(m.Now()), unreserved: adm.Unreserved}
	if adm.leased.estimate > 0 {
		s = m.settleLeased(p.KeyID, adm.leased, cost, m.Now())
		if m.deferrable(s) {
			m.deferSettlement(s) // written with the key's next ones (settle_defer.go)
			return nil
		}
	}
	if detached {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), SettleTimeout)
		defer cancel()
	}
	m.retrySettlements(ctx)
	if err := m.settle(ctx, s); err != nil {
		m.keepSettlement(s)
		return errors.Join(errors.New("metering: settling key budget (kept, retried with the next)"), err)
	}
	if !s.leased && !s.unreserved {
		m.budgetLeases.settled(p.KeyID, cost) // the next lease knows the estimate
	}
	return nil
}

// maxUnsettled bounds the settlements kept through an outage; retryBatch
// is how many one settlement retries before its own.
const (
	maxUnsettled = 100_000
	retryBatch   = 64
)

type settlement struct {
	keyID      string
	cost       int64
	clock      store.BudgetClock
	unreserved bool
	// leased: the request was admitted from a budget lease
	// (budget_lease.go); release of the key's leases (of the window
	// ending at resetsAt) go back with it.
	leased   bool
	release  int64
	resetsAt int64
	// maxCost: the largest cost of the settlements summed in this one
	// (0: cost; settle_defer.go).
	maxCost int64
}

// largest is the largest cost of one request in s.
func (s settlement) largest() int64 {
	if s.maxCost > 0 {
		return s.maxCost
	}
	return s.cost
}

func (m *Meter) settle(ctx context.Context, s settlement) error {
	if s.unreserved {
		return m.Store.AddKeyBudgetCost(ctx, s.keyID, s.cost, s.clock)
	}
	if s.leased && s.cost == 0 && s.release == 0 {
		return nil
	}
	return m.settleReserved(ctx, s)
}

func (m *Meter) keepSettlement(s settlement) {
	m.outage.mu.Lock()
	defer m.outage.mu.Unlock()
	if len(m.outage.unsettled) < maxUnsettled {
		m.outage.unsettled = append(m.outage.unsettled, s)
	}
}

// retrySettlements writes the kept settlements, oldest first, until one
// fails.
func (m *Meter) retrySettlements(ctx context.Context) {
	m.outage.mu.Lock()
	kept := m.outage.unsettled
	m.outage.unsettled = nil
	if len(kept) > retryBatch { // one request's settlement retries a bounded share
		m.outage.unsettled = kept[retryBatch:]
		kept = kept[:retryBatch]
	}
	m.outage.mu.Unlock()
	for i, s := range kept {
		if err := m.settle(ctx, s); err != nil {
			m.outage.mu.Lock()
			m.outage.unsettled = append(kept[i:len(kept):len(kept)], m.outage.unsettled...)
			m.outage.mu.Unlock()
			return
		}
	}
}

// budgetLocally checks p's key budget without the database (outage.go):
// nil admits, without a reservation.
func (m *Meter) budgetLocally(p auth.Principal, now time.Time, cause error) error {
	unavailable := wire.Unavailable(fmt.Errorf("metering: key budget: %w", cause))
	if m.ServeFor <= 0 {
		return unavailable
	}
	m.outage.mu.Lock()
	kb, known := m.outage.budgets[p.KeyID]
	m.outage.mu.Unlock()
	if !known || now.Sub(kb.at) >= m.ServeFor {
		return unavailable
	}
	if kb.b.UsedMicro(now)+kb.spent >= kb.b.LimitMicro {
		return KeyBudgetExceeded(kb.b)
	}
	return nil
}
