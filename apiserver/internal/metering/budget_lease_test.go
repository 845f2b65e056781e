package metering

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/auth"
	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/wire"
)

// The block size rule: at most BudgetLeaseCap and a quarter of what is
// left (after the used credits, the leases and the reservations in flight);
// none when that is under two requests' estimate or no estimate is known.
func TestBudgetBlockSize(t *testing.T) {
	t.Parallel()
	now := fixedNow
	live := now.Add(time.Minute).UnixMilli()
	for _, tc := range []struct {
		name string
		b    store.KeyBudget
		want int64
	}{
		{"no estimate yet", store.KeyBudget{LimitMicro: 1000 * credit}, 0},
		{"capped", store.KeyBudget{LimitMicro: 1000 * credit, MaxRequestMicro: credit}, BudgetLeaseCap},
		{"a quarter of what is left", store.KeyBudget{LimitMicro: 100 * credit, CreditsMicro: 20 * credit,
			MaxRequestMicro: credit, BudgetWindow: store.BudgetLifetime}, 20 * credit},
		{"leases and reservations count as spent", store.KeyBudget{LimitMicro: 100 * credit, CreditsMicro: 20 * credit,
			LeasedMicro: 36 * credit, LeasedUntil: live, Inflight: 4, ReservedUntil: live, MaxRequestMicro: credit,
			BudgetWindow: store.BudgetLifetime}, 10 * credit},
		{"lapsed leases and reservations do not", store.KeyBudget{LimitMicro: 100 * credit, CreditsMicro: 20 * credit,
			LeasedMicro: 36 * credit, LeasedUntil: 1, Inflight: 4, ReservedUntil: 1, MaxRequestMicro: credit,
			BudgetWindow: store.BudgetLifetime}, 20 * credit},
		{"under two estimates: reserve per request", store.KeyBudget{LimitMicro: 10 * credit, CreditsMicro: 3 * credit,
			MaxRequestMicro: credit, BudgetWindow: store.BudgetLifetime}, 0},
		{"a closed window counts as none used", store.KeyBudget{LimitMicro: 100 * credit, CreditsMicro: 99 * credit,
			ResetsAt: 1, MaxRequestMicro: credit, BudgetWindow: store.BudgetDaily}, 25 * credit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := blockSize(tc.b, now); got != tc.want {
				t.Fatalf("blockSize = %d, want %d", got, tc.want)
			}
		})
	}
}

// Two replicas (two Meters on one PostgreSQL) hammer one key of a budget
// of 60.5 credits, one credit a request, each client retrying while the
// rest is held by the other replica (key_budget_reserved) until it is
// refused with key_budget_exceeded: together they spend the whole budget
// and pass it by less than one request; most requests were admitted from
// leases, without a round trip; once every lease went back, the row holds
// no lease and no reservation.
func TestKeyBudgetLeasesTwoReplicas(t *testing.T) {
	t.Parallel()
	const limit = 60*credit + credit/2
	st, p := budgetKey(t, limit, store.BudgetLifetime)
	ctx := context.Background()
	replicas := []*Meter{New(st, nil), New(st, nil)}
	for _, m := range replicas {
		m.LeaseIdle = 20 * time.Millisecond
	}
	plan := catalog.Plan{Name: "p"}
	cost := Usage{PromptTokens: 1000}
	var admitted, fromLease, reservedRefusals atomic.Int64
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func(m *Meter) {
			defer wg.Done()
			for {
				adm, err := m.Admit(ctx, p, plan)
				var ae *wire.Error
				switch {
				case err == nil && adm.KeyBudget:
					admitted.Add(1)
					if adm.leased.estimate > 0 {
						fromLease.Add(1)
					}
					if err := m.Settle(ctx, p, adm, oneCredit, &cost); err != nil {
						t.Error(err)
						return
					}
				case errors.As(err, &ae) && ae.Code == "key_budget_reserved" && ae.Status == 429:
					reservedRefusals.Add(1)
				case errors.As(err, &ae) && ae.Code == "key_budget_exceeded" && ae.Status == 402:
					return
				default:
					t.Errorf("admission: %+v, %v", adm, err)
					return
				}
			}
		}(replicas[i%2])
	}
	wg.Wait()
	b, err := st.GetKeyBudget(ctx, p.KeyID)
	if err != nil {
		t.Fatal(err)
	}
	if b.CreditsMicro != admitted.Load()*credit {
		t.Fatalf("used %d micro after %d settled requests", b.CreditsMicro, admitted.Load())
	}
	if b.CreditsMicro < limit || b.CreditsMicro >= limit+credit {
		t.Fatalf("used %d of %d: the budget must end spent, by less than one request over", b.CreditsMicro, limit)
	}
	if fromLease.Load()*2 < admitted.Load() {
		t.Fatalf("only %d of %d requests admitted from leases", fromLease.Load(), admitted.Load())
	}
	for _, m := range replicas {
		if err := m.ReturnLeases(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if b, err = st.GetKeyBudget(ctx, p.KeyID); err != nil || b.LeasedMicro != 0 || b.Inflight != 0 {
		t.Fatalf("row after every lease went back: %+v %v", b, err)
	}
	t.Logf("%d admitted (%d from leases), %d refusals while the other replica held the rest",
		admitted.Load(), fromLease.Load(), reservedRefusals.Load())
}

// A lease and its return: the key's first request reserves (no estimate
// yet); the next leases a block (a quarter of what is left, capped), the
// one after is admitted from it without touching the row; settlements
// release what their costs used of the lease; the block goes back once it
// was idle BudgetLeaseIdle, not before; Close's ReturnLeases returns a
// block too.
func TestKeyBudgetLeaseIdleReturn(t *testing.T) {
	t.Parallel()
	st, p := budgetKey(t, 41*credit, store.BudgetLifetime)
	ctx := context.Background()
	m := New(st, nil)
	m.LeaseIdle = -1 // returned by the calls below only
	now := fixedNow
	m.Now = func() time.Time { return now }
	plan := catalog.Plan{Name: "p"}
	cost := Usage{PromptTokens: 1000}
	row := func() store.KeyBudget {
		t.Helper()
		b, err := st.GetKeyBudget(ctx, p.KeyID)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	first, err := m.Admit(ctx, p, plan)
	if err != nil || !first.KeyBudget || first.leased.estimate != 0 {
		t.Fatalf("first request: %+v %v; want a reservation", first, err)
	}
	if err := m.Settle(ctx, p, first, oneCredit, &cost); err != nil {
		t.Fatal(err)
	}
	a, err := m.Admit(ctx, p, plan)
	if err != nil || a.leased.estimate != credit {
		t.Fatalf("second request: %+v %v; want one from a lease", a, err)
	}
	if b := row(); b.LeasedMicro != 10*credit || b.Inflight != 0 { // (41 - 1) / 4
		t.Fatalf("after the lease: %+v, want 10 credits leased", b)
	}
	before := row()
	c, err := m.Admit(ctx, p, plan)
	if err != nil || c.leased.estimate != credit {
		t.Fatalf("third request: %+v %v; want one from the lease", c, err)
	}
	if b := row(); b != before {
		t.Fatalf("admission from the lease changed the row: %+v, was %+v", b, before)
	}
	for _, adm := range []Admission{a, c} {
		if err := m.Settle(ctx, p, adm, oneCredit, &cost); err != nil {
			t.Fatal(err)
		}
	}
	if b := row(); b.CreditsMicro != 3*credit || b.LeasedMicro != 8*credit {
		t.Fatalf("after two settlements from the lease: %+v, want 3 used and 8 leased", b)
	}
	now = now.Add(BudgetLeaseIdle / 2)
	if !m.ReturnIdleLeases(ctx, now) || row().LeasedMicro != 8*credit {
		t.Fatalf("a block used %v ago went back: %+v", BudgetLeaseIdle/2, row())
	}
	now = now.Add(BudgetLeaseIdle)
	if m.ReturnIdleLeases(ctx, now) || row().LeasedMicro != 0 || row().CreditsMicro != 3*credit {
		t.Fatalf("an idle block was kept: %+v", row())
	}

	// Shutdown: a block with nothing in flight goes back.
	d, err := m.Admit(ctx, p, plan)
	if err != nil || d.leased.estimate != credit || row().LeasedMicro == 0 {
		t.Fatalf("a new lease: %+v %v, row %+v", d, err, row())
	}
	if err := m.Settle(ctx, p, d, oneCredit, &cost); err != nil {
		t.Fatal(err)
	}
	if err := m.ReturnLeases(ctx); err != nil {
		t.Fatal(err)
	}
	if b := row(); b.LeasedMicro != 0 || b.CreditsMicro != 4*credit {
		t.Fatalf("after ReturnLeases: %+v, want 4 used and nothing leased", b)
	}

	// Turned off: every request reserves on the row.
	m.PerRequestBudget = true
	e, err := m.Admit(ctx, p, plan)
	if err != nil || e.leased.estimate != 0 || row().Inflight != 1 || row().LeasedMicro != 0 {
		t.Fatalf("per-request reservation: %+v %v, row %+v", e, err, row())
	}
}

// Through a database outage a replica goes on admitting from the lease it
// holds (no database needed); its settlements are kept and written when
// the database is back, so the row ends with every cost and no lease.
// Without a lease, the outage mode is as before (last known budget plus
// local spend).
func TestKeyBudgetLeaseThroughOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	realURL := storetest.PostgresURL(t)
	u, err := url.Parse(realURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewFaultProxy(t, u.Host)
	viaProxy, err := proxy.RewriteURL(realURL)
	if err != nil {
		t.Fatal(err)
	}
	direct := openStore(t, realURL)
	w, err := direct.CreateWorkspace(ctx, "lease", "free")
	if err != nil {
		t.Fatal(err)
	}
	usr, err := direct.CreateUser(ctx, "lease-outage@example.com")
	if err != nil {
		t.Fatal(err)
	}
	k, err := direct.CreateAPIKey(ctx, store.APIKey{Credential: store.Credential{ID: "kl" + w.ID, Prefix: "svc_sk_kl"},
		WorkspaceID: w.ID, UserID: usr.ID, KeyHash: "unused"})
	if err != nil {
		t.Fatal(err)
	}
	if err := direct.SetKeyBudget(ctx, k.ID, 41*credit, store.BudgetDaily); err != nil {
		t.Fatal(err)
	}
	p := auth.Principal{KeyID: k.ID, UserID: usr.ID, WorkspaceID: w.ID, KeyBudget: true, Billing: store.Billing{UsageBasedPricing: true}}
	plan := catalog.Plan{Name: "p"}
	one := Usage{PromptTokens: 1000}
	m := New(openStore(t, viaProxy), nil)
	m.ServeFor = time.Minute
	m.LeaseIdle = -1

	first, err := m.Admit(ctx, p, plan)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Settle(ctx, p, first, oneCredit, &one); err != nil {
		t.Fatal(err)
	}
	proxy.SetDown(false)
	adm, err := m.Admit(ctx, p, plan) // leases 10 credits
	if err != nil || adm.leased.estimate == 0 {
		t.Fatalf("lease before the outage: %+v %v", adm, err)
	}
	proxy.SetDown(true)
	if err := m.Settle(ctx, p, adm, oneCredit, &one); err == nil {
		t.Fatal("a settlement went through with the database down")
	}
	// 9 credits of the block left: 9 admissions from it, then the outage
	// mode's own check (1 credit known used, 41 allowed) admits unreserved.
	for i := range 10 {
		adm, err := m.Admit(ctx, p, plan)
		if err != nil {
			t.Fatalf("request %d during the outage: %v", i, err)
		}
		if fromLease := adm.leased.estimate > 0; fromLease != (i < 9) || adm.Unreserved == fromLease {
			t.Fatalf("request %d during the outage: %+v; want from the lease: %v", i, adm, i < 9)
		}
		_ = m.Record(ctx, p, plan, oneCredit, fmt.Sprintf("l%d", i), one, false)
		if err := m.Settle(ctx, p, adm, oneCredit, &one); err == nil {
			t.Fatal("a settlement went through with the database down")
		}
	}
	proxy.SetDown(false)
	if err := m.ReturnLeases(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := m.Admit(ctx, p, plan) // writes the kept settlements first
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Settle(ctx, p, next, oneCredit, &one); err != nil {
		t.Fatal(err)
	}
	if err := m.ReturnLeases(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := direct.GetKeyBudget(ctx, k.ID)
	if err != nil || b.CreditsMicro != 13*credit || b.LeasedMicro != 0 || b.Inflight != 0 {
		t.Fatalf("budget after recovery %+v (%v), want 13 credits used, nothing leased or in flight", b, err)
	}
}
