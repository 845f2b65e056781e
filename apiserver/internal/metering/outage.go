package metering

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/auth"
	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/wire"
)

// When PostgreSQL is down (docs/gateway.md): admission that cannot reach
// the database goes on from what this replica knows, for ServeFor after it
// last read it:
//   - rate limits are counted by this replica alone (each replica admits up
//     to the plan's limit per minute);
//   - usage windows are the workspace's as last read plus what this replica
//     recorded and has not written yet (Recorder.Unsynced);
//   - a key budget is the key's row as last read plus what this replica
//     recorded for the key since; nothing is reserved (no settlement).
// What this replica does not know (a workspace whose windows it never read,
// a budgeted key it never reserved for), or knows for longer than
// ServeFor, is refused with 503, as everything is with ServeFor 0
// (fail-closed).

// DefaultOutageServeFor is the default of SVC_DB_OUTAGE_SERVE_FOR.
const DefaultOutageServeFor = 10 * time.Minute

// outage is the state the Meter keeps for admission without the database.
type outage struct {
	mu sync.Mutex
	// rate: this replica's own count per bucket in the current minute.
	rate map[string]localCount
	// budgets: each budgeted key's row as last read, and the credits this
	// replica recorded for the key since.
	budgets map[string]knownBudget
	known   map[string]knownWindows
	// unsettled: key-budget settlements the database refused, retried
	// before the next one (budget.go).
	unsettled []settlement
}

type localCount struct {
	window int64
	n      int64
}

type knownBudget struct {
	b     store.KeyBudget
	at    time.Time
	spent int64
}

type knownWindows struct {
	windows []store.UsageWindow
	at      time.Time
}

// sawWindows remembers a workspace's windows as read from the database.
func (o *outage) sawWindows(ws string, w []store.UsageWindow, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.known == nil || len(o.known) > 100_000 {
		o.known = map[string]knownWindows{}
	}
	o.known[ws] = knownWindows{windows: w, at: at}
}

// sawBudget remembers a key's budget row as read from the database.
func (o *outage) sawBudget(b store.KeyBudget, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.budgets == nil || len(o.budgets) > 100_000 {
		o.budgets = map[string]knownBudget{}
	}
	o.budgets[b.KeyID] = knownBudget{b: b, at: at}
}

// spent adds a recorded request's credits to its key's local spend.
func (o *outage) spent(keyID string, credits int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if k, ok := o.budgets[keyID]; ok {
		k.spent += credits
		o.budgets[keyID] = k
	}
}

// admitLocally is Admit without the database (see above).
func (m *Meter) admitLocally(p auth.Principal, plan catalog.Plan, buckets []bucket, now time.Time, cause error) (Admission, error) {
	unavailable := wire.Unavailable(fmt.Errorf("metering: admit: %w", cause))
	if m.ServeFor <= 0 {
		return Admission{}, unavailable
	}
	o := &m.outage
	win := now.Truncate(RateWindow)
	reset := win.Add(RateWindow)
	adm := Admission{Reset: reset}
	o.mu.Lock()
	if o.rate == nil || len(o.rate) > 100_000 {
		o.rate = map[string]localCount{}
	}
	for _, b := range buckets {
		c := o.rate[b.name]
		if c.window != win.UnixMilli() {
			c = localCount{window: win.UnixMilli()}
		}
		if c.n >= b.limit {
			o.mu.Unlock()
			refused := Admission{Limit: b.limit, Remaining: 0, Reset: reset}
			return refused, wire.RateLimited(reset.Sub(now), refused.Headers())
		}
		if rem := b.limit - c.n - 1; adm.Limit == 0 || rem < adm.Remaining {
			adm.Limit, adm.Remaining = b.limit, rem
		}
	}
	for _, b := range buckets {
		c := o.rate[b.name]
		if c.window != win.UnixMilli() {
			c = localCount{window: win.UnixMilli()}
		}
		c.n++
		o.rate[b.name] = c
	}
	kw, knownWin := o.known[p.WorkspaceID]
	kb, knownKey := o.budgets[p.KeyID]
	o.mu.Unlock()

	if !p.UsageBasedPricing && len(plan.Windows) > 0 {
		if !knownWin || now.Sub(kw.at) >= m.ServeFor {
			return Admission{}, unavailable
		}
		var unsynced map[string]int64
		if m.Recorder != nil {
			unsynced = m.Recorder.Unsynced(p.WorkspaceID)
		}
		nowMs := now.UnixMilli()
		windows := make([]store.UsageWindow, 0, len(kw.windows))
		for _, c := range kw.windows {
			if c.ResetsAt > nowMs {
				c.CreditsMicro += unsynced[c.WindowName]
				windows = append(windows, c)
			}
		}
		adm.Window = tightestWindow(plan, windows, now)
		for _, w := range plan.Windows {
			for _, c := range windows {
				if c.WindowName == w.Name && c.CreditsMicro >= w.LimitMicro() {
					return adm, wire.UsageLimitReached(w.Name, time.UnixMilli(c.ResetsAt))
				}
			}
		}
	}
	if p.KeyID != "" && p.KeyBudget {
		if !knownKey || now.Sub(kb.at) >= m.ServeFor {
			return adm, unavailable
		}
		if kb.b.UsedMicro(now)+kb.spent >= kb.b.LimitMicro {
			return adm, KeyBudgetExceeded(kb.b)
		}
	}
	return adm, nil
}

// dbDown reports whether err is the database failing (not the caller
// going away).
func dbDown(ctx context.Context, err error) bool { return err != nil && ctx.Err() == nil }

// wrote adds what this replica's recorder committed to the known windows
// (a later read may already hold it: counted twice until the next read,
// which only refuses earlier).
func (o *outage) wrote(credits map[string]map[string]int64, nowMs int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for ws, byName := range credits {
		k, ok := o.known[ws]
		if !ok {
			continue
		}
		w := append([]store.UsageWindow(nil), k.windows...)
		for i := range w {
			if w[i].ResetsAt > nowMs {
				w[i].CreditsMicro += byName[w[i].WindowName]
			}
		}
		k.windows = w
		o.known[ws] = k
	}
}
