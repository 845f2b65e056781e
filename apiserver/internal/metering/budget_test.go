package metering

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/auth"
	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/wire"
)

// budgetKey is a key of a fresh workspace (on the Postgres store) with a
// budget of limit micro-credits in window.
func budgetKey(t *testing.T, limit int64, window string) (*store.Store, auth.Principal) {
	t.Helper()
	st, w := workspace(t)
	ctx := context.Background()
	u, err := st.CreateUser(ctx, "budget-"+w.ID+"@example.com")
	if err != nil {
		t.Fatal(err)
	}
	k, err := st.CreateAPIKey(ctx, store.APIKey{Credential: store.Credential{ID: "kb" + w.ID, Prefix: "svc_sk_kb"},
		WorkspaceID: w.ID, UserID: u.ID, KeyHash: "unused"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetKeyBudget(ctx, k.ID, limit, window); err != nil {
		t.Fatal(err)
	}
	// Usage-based pricing: the plan's windows do not apply, the key's budget does.
	return st, auth.Principal{KeyID: k.ID, UserID: u.ID, WorkspaceID: w.ID, KeyBudget: true,
		Billing: store.Billing{UsageBasedPricing: true}}
}

// oneCredit is a model where 1000 prompt tokens cost one credit.
var oneCredit = catalog.Model{ID: "m", Price: catalog.Price{InputPerMTok: 1000}}

const credit = 1_000_000 // micro-credits

// Parallel streams of one key at its budget, over two replicas: in every
// round all admitted requests are in flight together (none settles before
// every attempt of the round has its answer), and the budget row's
// reservations equal them; refusals are 429 key_budget_reserved while the
// rest of the budget is reserved, 402 key_budget_exceeded once it is spent.
// Afterwards the key has used exactly what the settled requests cost, and
// that passes the limit by at most one request's cost.
func TestKeyBudgetParallelStreamsAtLimit(t *testing.T) {
	t.Parallel()
	const limit = 5*credit + credit/2
	st, p := budgetKey(t, limit, store.BudgetDaily)
	ctx := context.Background()
	replicas := []*Meter{New(st, nil), New(st, nil)}
	plan := catalog.Plan{Name: "p"}
	cost := Usage{PromptTokens: 1000} // one credit each

	settled, rounds := int64(0), 0
	for ; rounds < 20; rounds++ {
		const attempts = 24
		start := make(chan struct{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		var admitted []Admission
		var reserved, exceeded int
		for i := range attempts {
			wg.Add(1)
			go func(m *Meter) {
				defer wg.Done()
				<-start
				adm, err := m.Admit(ctx, p, plan)
				mu.Lock()
				defer mu.Unlock()
				var ae *wire.Error
				switch {
				case err == nil && adm.KeyBudget:
					admitted = append(admitted, adm)
				case errors.As(err, &ae) && ae.Code == "key_budget_reserved" && ae.Status == 429:
					reserved++
				case errors.As(err, &ae) && ae.Code == "key_budget_exceeded" && ae.Status == 402 && ae.ResetsAt != "":
					exceeded++
				default:
					t.Errorf("admission: %+v, %v", adm, err)
				}
			}(replicas[i%2])
		}
		close(start)
		wg.Wait()
		b, err := st.GetKeyBudget(ctx, p.KeyID)
		if err != nil {
			t.Fatal(err)
		}
		if b.Inflight != int64(len(admitted)) {
			t.Fatalf("round %d: %d admitted but %d reservations on the row", rounds, len(admitted), b.Inflight)
		}
		// Everything in flight together: what was used plus one credit per
		// request stays within the limit, but for at most one request.
		if used := b.CreditsMicro + int64(len(admitted))*credit; len(admitted) > 1 && used > limit {
			t.Fatalf("round %d: %d in flight at %d used: %d > limit %d", rounds, len(admitted), b.CreditsMicro, used, limit)
		}
		if len(admitted) == 0 {
			if exceeded != attempts {
				t.Fatalf("round %d: nothing admitted but only %d of %d refusals are 402", rounds, exceeded, attempts)
			}
			break
		}
		for i, adm := range admitted {
			wg.Add(1)
			go func(m *Meter) {
				defer wg.Done()
				if err := m.Settle(ctx, p, adm, oneCredit, &cost); err != nil {
					t.Error(err)
				}
			}(replicas[i%2])
		}
		wg.Wait()
		settled += int64(len(admitted))
	}
	b, err := st.GetKeyBudget(ctx, p.KeyID)
	if err != nil {
		t.Fatal(err)
	}
	if b.CreditsMicro != settled*credit || b.Inflight != 0 {
		t.Fatalf("used %d micro with %d in flight after %d settled requests, want %d and 0", b.CreditsMicro, b.Inflight, settled, settled*credit)
	}
	if b.CreditsMicro < limit || b.CreditsMicro > limit+credit {
		t.Fatalf("used %d of %d: the budget must end spent, by at most one request (%d) over", b.CreditsMicro, limit, credit)
	}
	if rounds < 2 {
		t.Fatalf("spent in %d rounds: the test did not run parallel rounds", rounds)
	}
}

// A new key's first requests are admitted one at a time (no cost known
// yet); a request that failed settles at no cost and frees its place; a
// lifetime budget's 402 has no resets_at; a daily budget's window resets
// at the next 00:00 UTC, and the next day's request is admitted.
func TestKeyBudgetWindows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	plan := catalog.Plan{Name: "p"}
	cost := Usage{PromptTokens: 1000}
	for _, tc := range []struct {
		window    string
		nextReset time.Time // zero: never
	}{
		{store.BudgetDaily, time.Date(2026, 5, 2, 0, 0, 0, 0, time.UTC)},
		{store.BudgetMonthly, time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)},
		{store.BudgetLifetime, time.Time{}},
	} {
		t.Run(tc.window, func(t *testing.T) {
			t.Parallel()
			st, p := budgetKey(t, credit, tc.window)
			m := New(st, nil)
			now := fixedNow
			m.Now = func() time.Time { return now }
			first, err := m.Admit(ctx, p, plan)
			if err != nil || !first.KeyBudget {
				t.Fatalf("first request: %+v, %v", first, err)
			}
			var ae *wire.Error
			if _, err := m.Admit(ctx, p, plan); !errors.As(err, &ae) || ae.Code != "key_budget_reserved" {
				t.Fatalf("second request while the first (cost unknown) is in flight: %v, want key_budget_reserved", err)
			}
			if err := m.Settle(ctx, p, first, oneCredit, nil); err != nil { // failed: no cost
				t.Fatal(err)
			}
			adm, err := m.Admit(ctx, p, plan)
			if err != nil {
				t.Fatalf("after a request settled at no cost: %v", err)
			}
			if err := m.Settle(ctx, p, adm, oneCredit, &cost); err != nil {
				t.Fatal(err)
			}
			_, err = m.Admit(ctx, p, plan)
			if !errors.As(err, &ae) || ae.Code != "key_budget_exceeded" || ae.Status != 402 || ae.Type != wire.TypeBilling {
				t.Fatalf("spent budget: %v, want 402 billing_error key_budget_exceeded", err)
			}
			want := ""
			if !tc.nextReset.IsZero() {
				want = tc.nextReset.Format(time.RFC3339)
			}
			if ae.ResetsAt != want {
				t.Fatalf("resets_at %q, want %q", ae.ResetsAt, want)
			}
			if tc.nextReset.IsZero() {
				return
			}
			now = tc.nextReset
			if _, err := m.Admit(ctx, p, plan); err != nil {
				t.Fatalf("in the next window: %v", err)
			}
		})
	}
}

// A key without a budget row is never reserved against, even when the
// principal (cached by authentication) still says it has one.
func TestKeyBudgetRemoved(t *testing.T) {
	t.Parallel()
	st, p := budgetKey(t, credit, store.BudgetDaily)
	if err := st.ClearKeyBudget(context.Background(), p.KeyID); err != nil {
		t.Fatal(err)
	}
	adm, err := New(st, nil).Admit(context.Background(), p, catalog.Plan{Name: "p"})
	if err != nil || adm.KeyBudget {
		t.Fatalf("after the budget was removed: %+v, %v; want admitted without a reservation", adm, err)
	}
}

// Settlements of one key ending together (written in batches while one is
// in flight) each land once: the row ends with every cost added, no
// reservation left and the largest cost as its estimate, and each Settle
// returns only once its own settlement is on the row.
func TestKeyBudgetConcurrentSettlements(t *testing.T) {
	t.Parallel()
	st, p := budgetKey(t, 1_000_000*credit, store.BudgetMonthly)
	ctx := context.Background()
	m := New(st, nil)
	plan := catalog.Plan{Name: "p"}
	// The key's first request is admitted alone (no cost known yet).
	adm, err := m.Admit(ctx, p, plan)
	if err != nil || !adm.KeyBudget {
		t.Fatalf("first admission: %+v %v", adm, err)
	}
	if err := m.Settle(ctx, p, adm, oneCredit, &Usage{PromptTokens: 1000}); err != nil {
		t.Fatal(err)
	}
	const n = 40
	adms := make([]Admission, n)
	for i := range adms {
		if adms[i], err = m.Admit(ctx, p, plan); err != nil || !adms[i].KeyBudget {
			t.Fatalf("admission %d: %+v %v", i, adms[i], err)
		}
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	want := int64(credit)
	for i, adm := range adms {
		tokens := int64(1000 * (i%7 + 1)) // 1 to 7 credits
		want += tokens * credit / 1000
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := m.Settle(ctx, p, adm, oneCredit, &Usage{PromptTokens: tokens}); err != nil {
				t.Error(err)
				return
			}
			b, err := st.GetKeyBudget(ctx, p.KeyID)
			if err != nil {
				t.Error(err)
				return
			}
			if b.Inflight > n-1 || b.CreditsMicro < credit+tokens*credit/1000 {
				t.Errorf("after a settlement of %d credits returned: %d in flight, %d used", tokens/1000, b.Inflight, b.CreditsMicro)
			}
		}()
	}
	close(start)
	wg.Wait()
	b, err := st.GetKeyBudget(ctx, p.KeyID)
	if err != nil {
		t.Fatal(err)
	}
	if b.CreditsMicro != want || b.Inflight != 0 || b.MaxRequestMicro != 7*credit {
		t.Fatalf("row after %d settlements: used %d in flight %d largest %d; want %d, 0, %d",
			n+1, b.CreditsMicro, b.Inflight, b.MaxRequestMicro, want, 7*credit)
	}
}
