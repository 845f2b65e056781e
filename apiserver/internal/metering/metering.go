// Package metering enforces and records public-API usage per workspace
// (spec 1 and 8; docs/design.md §6): requests per minute per API key and per
// workspace, shared by every replica through the database; usage windows in
// credits computed from the upstream's reported tokens and the model price;
// and the usage record of each answered request.
package metering

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/auth"
	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/wire"
)

// RateWindow is the length of a rate-limit window.
const RateWindow = time.Minute

// Meter checks and records usage.
type Meter struct {
	Store    *store.Store
	Recorder *Recorder // when set, Record queues instead of writing inline
	Now      func() time.Time
	// ServeFor: while the database is down, admission goes on from what
	// this replica read within this long (outage.go); 0: fail closed (503).
	ServeFor time.Duration
	// PerRequestBudget: key budgets reserve each request in the database
	// rather than from this replica's budget leases (budget_lease.go).
	PerRequestBudget bool
	// LeaseIdle: how long a budget lease may go unused before it goes back
	// (0: BudgetLeaseIdle; negative: only ReturnIdleLeases returns them).
	LeaseIdle time.Duration
	// SettleDelay: settlements of requests admitted from a budget lease
	// and covered by it are written together, per key, at most this long
	// after the first (settle_defer.go); 0: each is written at once.
	SettleDelay time.Duration

	outage  outage
	batches settleBatches
	leases  leases
	windows windowCache

	budgetLeases budgetLeases
	deferred     deferredSettlements
	// background: the windows' background reads and the rate permits
	// leased ahead (leaseAhead) in flight.
	background sync.WaitGroup
}

// New returns a Meter on st with the wall clock; rec may be nil.
func New(st *store.Store, rec *Recorder) *Meter {
	m := &Meter{Store: st, Recorder: rec, Now: time.Now}
	if rec != nil {
		// A written batch adds its credits to the cached windows instead of
		// dropping them: the next admission needs no database read
		// (windows.go).
		rec.windows = &m.windows
		rec.outage = &m.outage
	}
	return m
}

// Admission is what a successful Admit tells the response.
type Admission struct {
	Limit     int64 // the tightest applicable limit, 0 when none
	Remaining int64
	Reset     time.Time
	// KeyBudget: a reservation against the key's budget was taken; the
	// request must be settled (Settle) once it ends.
	KeyBudget bool
	// Unreserved: the key budget was checked without the database (an
	// outage): Settle adds the cost without releasing a reservation.
	Unreserved bool
	// leased: admitted from this replica's budget lease.
	leased leasedAdmission
	// Window is the plan's usage window with the fewest credits left (its
	// LimitMicro is 0 when no window applies: usage-based pricing, or a
	// plan without windows); the rate-limit headers report it in tokens.
	Window WindowLeft
}

// WindowLeft is one usage window's allowance as admission saw it.
type WindowLeft struct {
	Name       string
	LimitMicro int64
	UsedMicro  int64
	Reset      time.Time
}

// tightestWindow is the window of plan with the fewest credits left, from
// the workspace's windows (one not open yet has used nothing and would
// reset a whole duration from now).
func tightestWindow(plan catalog.Plan, windows []store.UsageWindow, now time.Time) WindowLeft {
	var best WindowLeft
	nowMs := now.UnixMilli()
	for _, w := range plan.Windows {
		wl := WindowLeft{Name: w.Name, LimitMicro: w.LimitMicro(), Reset: now.Add(w.Duration)}
		for _, c := range windows {
			if c.WindowName == w.Name && c.ResetsAt > nowMs {
				wl.UsedMicro, wl.Reset = c.CreditsMicro, time.UnixMilli(c.ResetsAt)
			}
		}
		if best.LimitMicro == 0 || wl.LimitMicro-wl.UsedMicro < best.LimitMicro-best.UsedMicro {
			best = wl
		}
	}
	return best
}

// Headers returns the X-RateLimit-* headers of a.
func (a Admission) Headers() map[string]string {
	if a.Limit == 0 {
		return nil
	}
	return map[string]string{
		"X-RateLimit-Limit":     strconv.FormatInt(a.Limit, 10),
		"X-RateLimit-Remaining": strconv.FormatInt(max(a.Remaining, 0), 10),
		"X-RateLimit-Reset":     strconv.FormatInt(a.Reset.Unix(), 10),
	}
}

type bucket struct {
	name  string
	limit int64
}

// Admit applies the rate limits, then the usage windows (spec 7.1 order:
// 429 before 402), then the key's own budget (budget.go), which reserves.
// A refused request's Admission still says what was known (the headers of
// the refusal); only a nil error admits. Rate permits come from this replica's leases when it has
// some (leases.go) and usage windows from a short cache (windows.go); what is
// missing is read in one database round trip.
func (m *Meter) Admit(ctx context.Context, p auth.Principal, plan catalog.Plan) (Admission, error) {
	now := m.Now()
	windowStart := now.Truncate(RateWindow)
	reset := windowStart.Add(RateWindow)
	win := windowStart.UnixMilli()

	var bucketArr [3]bucket // at most three: key, project, workspace
	buckets := bucketArr[:0]
	if p.KeyID != "" && plan.RPM > 0 {
		buckets = append(buckets, bucket{"key:" + p.KeyID, plan.RPM})
	}
	if p.ProjectID != "" && plan.RPM > 0 {
		buckets = append(buckets, bucket{"project:" + p.ProjectID, plan.RPM})
	}
	if plan.WorkspaceRPM > 0 {
		buckets = append(buckets, bucket{"ws:" + p.WorkspaceID, plan.WorkspaceRPM})
	}

	// A bucket this replica found spent in this window is served only from
	// permits this replica still owns or is bringing back (takeSettled);
	// without one the request is refused at once: nothing is written and
	// what it took of other buckets goes back.
	var ownedArr [len(bucketArr)]lease
	owned := ownedArr[:len(buckets)]
	for i, b := range buckets {
		if !m.leases.isSpent(b.name, win) {
			continue
		}
		le, ok := m.leases.takeSettled(b.name, win)
		if !ok {
			for j, bj := range buckets {
				if owned[j].count != 0 {
					m.leases.put(bj.name, lease{window: win, left: 1, count: owned[j].count})
				}
			}
			refused := Admission{Limit: b.limit, Remaining: 0, Reset: reset}
			return refused, wire.RateLimited(reset.Sub(now), refused.Headers())
		}
		owned[i] = le
	}

	// Permits this replica already owns.
	var incr []store.RateIncrement
	var ahead []bucket
	for i, b := range buckets {
		if owned[i].count != 0 {
			continue
		}
		le, ok, next := m.leases.takeOrLease(b.name, win, leaseSize(b.limit))
		if next {
			ahead = append(ahead, b)
		}
		if ok {
			owned[i] = le
			continue
		}
		incr = append(incr, store.RateIncrement{Bucket: b.name, N: leaseSize(b.limit)})
	}
	if len(ahead) > 0 {
		m.background.Go(func() { m.leaseAhead(win, ahead) })
	}
	wantWindows := !p.UsageBasedPricing && len(plan.Windows) > 0
	windows, cached := m.windows.get(p.WorkspaceID, now)
	readWindows := wantWindows && !cached
	gen := m.windows.generation()
	if wantWindows && cached && m.windows.refreshDue(p.WorkspaceID, now) {
		m.background.Go(func() { m.refreshWindows(p.WorkspaceID) })
	}

	var counts map[string]int64
	endLeases := func() {
		for _, in := range incr {
			m.leases.end(in.Bucket)
		}
	}
	if len(incr) > 0 || readWindows {
		st, err := m.Store.Admit(ctx, win, incr, p.WorkspaceID, readWindows)
		if err != nil {
			endLeases()
			if ctx.Err() != nil {
				return Admission{}, wire.Internal(fmt.Errorf("metering: admit: %w", err))
			}
			for i, b := range buckets { // permits taken from leases go back
				if owned[i].count != 0 {
					m.leases.put(b.name, lease{window: win, left: 1, count: owned[i].count})
				}
			}
			return m.admitLocally(p, plan, buckets, now, err)
		}
		counts = st.Counts
		if readWindows {
			windows = st.Windows
			m.windows.put(p.WorkspaceID, windows, now, gen)
			m.outage.sawWindows(p.WorkspaceID, windows, now)
		}
	}

	adm := Admission{Reset: reset}
	limited := -1
	held := make([]int64, len(buckets)) // the count of each permit this request holds (0: none)
	// Put every block leased just now before anything waits (takeSettled).
	spent := make([]bool, len(buckets))
	for i, b := range buckets {
		if owned[i].count != 0 {
			held[i] = owned[i].count
			continue
		}
		c := counts[b.name]
		if g := granted(c, leaseSize(b.limit), b.limit); g > 0 {
			// One permit for this request; the rest stay with this replica.
			m.leases.put(b.name, lease{window: win, left: g - 1, count: c})
			held[i] = c
		} else {
			spent[i] = true
			m.leases.markSpent(b.name, win) // later requests stop leasing
		}
	}
	endLeases()
	for i, b := range buckets {
		count, ok := held[i], held[i] != 0
		if spent[i] {
			// The shared count is spent, but a concurrent request of this
			// replica may be bringing permits back: use one rather than
			// strand it.
			if le, got := m.leases.takeSettled(b.name, win); got {
				count, ok = le.count, true
			}
		}
		if !ok {
			if limited < 0 {
				limited = i
			}
			continue
		}
		held[i] = max(count, 1)
		if rem := b.limit - count; adm.Limit == 0 || rem < adm.Remaining {
			adm.Limit, adm.Remaining = b.limit, rem
		}
	}
	if limited >= 0 {
		// A refused request uses no permit: what it took goes back.
		for i, b := range buckets {
			if held[i] != 0 {
				m.leases.put(b.name, lease{window: win, left: 1, count: held[i]})
			}
		}
		b := buckets[limited]
		refused := Admission{Limit: b.limit, Remaining: 0, Reset: reset}
		return refused, wire.RateLimited(reset.Sub(now), refused.Headers())
	}

	nowMs := now.UnixMilli()
	if wantWindows {
		adm.Window = tightestWindow(plan, windows, now)
	}
	for _, w := range plan.Windows {
		for _, c := range windows {
			if wantWindows && c.WindowName == w.Name && c.ResetsAt > nowMs && c.CreditsMicro >= w.LimitMicro() {
				return adm, wire.UsageLimitReached(w.Name, time.UnixMilli(c.ResetsAt))
			}
		}
	}
	if p.KeyID != "" && p.KeyBudget {
		la, reserved, local, err := m.reserveBudget(ctx, p, now)
		if err != nil {
			return adm, err
		}
		adm.KeyBudget, adm.Unreserved, adm.leased = reserved || local, local, la
	}
	return adm, nil
}

// refreshWindows reads a workspace's windows again off the request path
// (windowRefreshAhead), as of the time before the read and only if no
// usage write overlapped it (windowCache.put); a failed read leaves the
// cached windows to expire.
func (m *Meter) refreshWindows(workspaceID string) {
	defer m.windows.refreshed(workspaceID)
	gen := m.windows.generation()
	at := m.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w, err := m.Store.UsageWindows(ctx, workspaceID)
	if err != nil {
		return
	}
	m.windows.put(workspaceID, w, at, gen)
	m.outage.sawWindows(workspaceID, w, at)
}

// leaseAhead leases the next block of each of buckets (in steady use) off
// the request path (leases.takeOrLease), in one round trip, and ends those
// leases. A failed round trip puts nothing: the next request that finds no
// permit leases on its own path (and meets the outage there).
func (m *Meter) leaseAhead(win int64, buckets []bucket) {
	incr := make([]store.RateIncrement, len(buckets))
	for i, b := range buckets {
		incr[i] = store.RateIncrement{Bucket: b.name, N: leaseSize(b.limit)}
	}
	defer func() {
		for _, in := range incr {
			m.leases.end(in.Bucket)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := m.Store.Admit(ctx, win, incr, "", false)
	if err != nil {
		return
	}
	for i, b := range buckets {
		c := st.Counts[b.name]
		if g := granted(c, incr[i].N, b.limit); g > 0 {
			m.leases.put(b.name, lease{window: win, left: g, count: c})
		} else {
			m.leases.markSpent(b.name, win)
		}
	}
}

// Usage is the token usage an upstream reported for one request.
type Usage struct {
	PromptTokens     int64
	CompletionTokens int64
	ReasoningTokens  int64
	// CachedTokens were read from the provider's prompt cache and
	// CacheWriteTokens written to it; both are part of PromptTokens.
	CachedTokens     int64
	CacheWriteTokens int64
	Deployment       string // the deployment that answered (provider/upstream_model)
}

// Record stores the usage of one answered request and adds its credits to
// the plan's windows.
func (m *Meter) Record(ctx context.Context, p auth.Principal, plan catalog.Plan, model catalog.Model,
	requestID string, u Usage, streamed bool) error {
	rec := store.UsageRecord{
		RequestID: requestID, WorkspaceID: p.WorkspaceID, Model: model.ID, Deployment: u.Deployment,
		PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, ReasoningTokens: u.ReasoningTokens,
		CachedTokens: u.CachedTokens, CacheWriteTokens: u.CacheWriteTokens,
		CreditsMicro: model.CreditsMicroCached(u.PromptTokens, u.CachedTokens, u.CacheWriteTokens, u.CompletionTokens),
		Streamed:     streamed,
	}
	if p.KeyID != "" {
		rec.APIKeyID = &p.KeyID
	}
	if p.ProjectID != "" {
		rec.ProjectID = &p.ProjectID
	}
	specs := make([]store.WindowSpec, len(plan.Windows))
	for i, w := range plan.Windows {
		specs[i] = store.WindowSpec{Name: w.Name, Duration: w.Duration}
	}
	if p.KeyID != "" && p.KeyBudget {
		m.outage.spent(p.KeyID, rec.CreditsMicro)
	}
	if m.Recorder != nil {
		rec.CreatedAt = m.Now().UTC()
		m.Recorder.Enqueue(rec, specs)
		return nil
	}
	gen := m.windows.beginWrite()
	now := m.Now()
	if err := m.Store.RecordUsage(ctx, rec, specs, now); err != nil {
		m.windows.failed(rec.WorkspaceID)
		return err
	}
	m.windows.written(windowCredits([]store.UsageRecord{rec}, [][]store.WindowSpec{specs}), now.UnixMilli(), gen)
	return nil
}
