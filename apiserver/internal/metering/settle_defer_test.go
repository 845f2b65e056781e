package metering

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/store"
)

// With SettleDelay, settlements a budget lease covers wait in memory and are
// written as one statement per key: the row's used + leased credits (what
// every other replica admits against) are the same before and after the
// write; the sum written is exactly the costs settled; a cost beyond what
// the block has left is written at once.
func TestDeferredLeasedSettlements(t *testing.T) {
	t.Parallel()
	st, p := budgetKey(t, 41*credit, store.BudgetLifetime)
	ctx := context.Background()
	m := New(st, nil)
	m.LeaseIdle = -1
	m.SettleDelay = time.Hour // written by the calls below only
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
	// The first request reserves on the row (no estimate yet) and settles at once.
	first, err := m.Admit(ctx, p, plan)
	if err != nil || first.leased.estimate != 0 {
		t.Fatalf("first request: %+v %v", first, err)
	}
	if err := m.Settle(ctx, p, first, oneCredit, &cost); err != nil {
		t.Fatal(err)
	}
	if b := row(); b.CreditsMicro != credit || b.Inflight != 0 {
		t.Fatalf("a reserved settlement waited: %+v", b)
	}
	// Five requests from a lease of 10 credits, settled concurrently.
	adms := make([]Admission, 5)
	for i := range adms {
		if adms[i], err = m.Admit(ctx, p, plan); err != nil || adms[i].leased.estimate != credit {
			t.Fatalf("request %d: %+v %v; want one from the lease", i, adms[i], err)
		}
	}
	leased := row()
	if leased.LeasedMicro != 10*credit {
		t.Fatalf("after the lease: %+v", leased)
	}
	var wg sync.WaitGroup
	for _, adm := range adms {
		wg.Go(func() {
			if err := m.Settle(ctx, p, adm, oneCredit, &cost); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if b := row(); b != leased {
		t.Fatalf("covered settlements were written at once: %+v, was %+v", b, leased)
	}
	m.FlushSettlements(ctx)
	b := row()
	if b.CreditsMicro != 6*credit || b.LeasedMicro != 5*credit {
		t.Fatalf("after the flush: %+v, want 6 used and 5 leased", b)
	}
	if b.CreditsMicro+b.LeasedMicro != leased.CreditsMicro+leased.LeasedMicro {
		t.Fatalf("used + leased moved: %+v, was %+v", b, leased)
	}
	// A request costing more than the block has left is written at once.
	big, err := m.Admit(ctx, p, plan)
	if err != nil || big.leased.estimate != credit {
		t.Fatalf("request from the lease: %+v %v", big, err)
	}
	huge := Usage{PromptTokens: 7000} // 7 credits; 5 are left in the block
	if err := m.Settle(ctx, p, big, oneCredit, &huge); err != nil {
		t.Fatal(err)
	}
	if b := row(); b.CreditsMicro != 13*credit || b.LeasedMicro != 0 || b.MaxRequestMicro != 7*credit {
		t.Fatalf("a cost beyond the block waited: %+v, want 13 used, nothing leased, estimate 7", b)
	}
	// The next request reserves on the row (the block cannot cover the new
	// estimate); shutdown leaves nothing leased or in flight.
	now = now.Add(time.Second)
	next, err := m.Admit(ctx, p, plan)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Settle(ctx, p, next, oneCredit, &cost); err != nil {
		t.Fatal(err)
	}
	if err := m.ReturnLeases(ctx); err != nil {
		t.Fatal(err)
	}
	if b := row(); b.CreditsMicro != 14*credit || b.LeasedMicro != 0 || b.Inflight != 0 {
		t.Fatalf("after ReturnLeases: %+v, want 14 used and nothing leased or in flight", b)
	}
}

// The flush timer writes what waits without any other call.
func TestDeferredSettlementsTimer(t *testing.T) {
	t.Parallel()
	st, p := budgetKey(t, 41*credit, store.BudgetLifetime)
	ctx := context.Background()
	m := New(st, nil)
	m.LeaseIdle = -1
	m.SettleDelay = time.Millisecond
	plan := catalog.Plan{Name: "p"}
	cost := Usage{PromptTokens: 1000}
	for i := range 3 {
		adm, err := m.Admit(ctx, p, plan)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && adm.leased.estimate == 0 {
			t.Fatalf("request %d not from a lease: %+v", i, adm)
		}
		if err := m.Settle(ctx, p, adm, oneCredit, &cost); err != nil {
			t.Fatal(err)
		}
	}
	m.deferred.writing.Wait() // the timer's flush has run
	b, err := st.GetKeyBudget(ctx, p.KeyID)
	if err != nil || b.CreditsMicro != 3*credit {
		t.Fatalf("after the timer: %+v %v, want 3 used", b, err)
	}
}

// SettleDetached writes a settlement whose caller's context is already
// cancelled (a client gone), where Settle with that context fails and keeps
// it for later.
func TestSettleDetachedOutlivesItsContext(t *testing.T) {
	t.Parallel()
	st, p := budgetKey(t, 41*credit, store.BudgetLifetime)
	m := New(st, nil)
	m.LeaseIdle = -1
	plan := catalog.Plan{Name: "p"}
	cost := Usage{PromptTokens: 1000}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	first, err := m.Admit(context.Background(), p, plan)
	if err != nil || !first.KeyBudget || first.leased.estimate != 0 {
		t.Fatalf("first request: %+v %v; want a reservation on the row", first, err)
	}
	if err := m.Settle(gone, p, first, oneCredit, &cost); err == nil {
		t.Fatal("Settle with a cancelled context wrote")
	}
	second, err := m.Admit(context.Background(), p, plan)
	if err != nil || !second.KeyBudget {
		t.Fatalf("second request: %+v %v", second, err)
	}
	if err := m.SettleDetached(gone, p, second, oneCredit, &cost); err != nil {
		t.Fatalf("SettleDetached with a cancelled context: %v", err)
	}
	// The kept settlement went with it: both costs are on the row.
	b, err := st.GetKeyBudget(context.Background(), p.KeyID)
	if err != nil {
		t.Fatal(err)
	}
	if b.CreditsMicro != 2*credit {
		t.Fatalf("row %+v: want both requests' %d micro-credits", b, 2*credit)
	}
}
