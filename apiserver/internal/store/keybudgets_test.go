package store_test

import (
	"context"
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
)

// The key-budget statements on both dialects: authentication sees that a
// key is budgeted; a reservation is taken alone while no cost is known,
// then as many as fit at the largest cost seen; a closed window starts at
// zero with the next reset; changing the window starts a new one, changing
// the limit keeps what was used; a lapsed reservation (its replica died)
// no longer holds.
func TestKeyBudgetStatements(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		w, u := fixture(t, s)
		k, err := s.CreateAPIKey(ctx, store.APIKey{Credential: store.Credential{ID: "kb1", Prefix: "p"},
			WorkspaceID: w.ID, UserID: u.ID, KeyHash: "h"})
		if err != nil {
			t.Fatal(err)
		}
		if a, err := s.LookupKey(ctx, k.ID); err != nil || a.Budgeted {
			t.Fatalf("lookup before a budget: %+v %v", a, err)
		}
		if err := s.SetKeyBudget(ctx, k.ID, 10, store.BudgetDaily); err != nil {
			t.Fatal(err)
		}
		if a, err := s.LookupKey(ctx, k.ID); err != nil || !a.Budgeted {
			t.Fatalf("lookup with a budget: %+v %v", a, err)
		}
		c := store.BudgetClock{Now: 1000, Day: 5000, Month: 9000, Until: 4000}
		reserve := func(want bool) store.KeyBudget {
			t.Helper()
			b, ok, err := s.ReserveKeyBudget(ctx, k.ID, c)
			if err != nil || ok != want {
				t.Fatalf("reserve at %+v: ok %v (want %v), %+v, %v", c, ok, want, b, err)
			}
			return b
		}
		if b := reserve(true); b.ResetsAt != 5000 || b.Inflight != 1 {
			t.Fatalf("first reservation: %+v, want resets_at 5000 and 1 in flight", b)
		}
		reserve(false) // no cost known: one at a time
		mustOK(t, s.SettleKeyBudget(ctx, k.ID, 3, c))
		reserve(true) // 3 + 1×3 ≤ 10
		reserve(true) // 3 + 2×3 ≤ 10
		if b := reserve(false); b.Inflight != 2 || b.CreditsMicro != 3 {
			t.Fatalf("third: %+v; 3 + 3×3 > 10 must be refused", b)
		}
		mustOK(t, s.SettleKeyBudget(ctx, k.ID, 3, c))
		mustOK(t, s.SettleKeyBudget(ctx, k.ID, 4, c))
		b, err := s.GetKeyBudget(ctx, k.ID)
		if err != nil || b.CreditsMicro != 10 || b.Inflight != 0 || b.MaxRequestMicro != 4 {
			t.Fatalf("after settling: %+v %v; want 10 used, none in flight, max 4", b, err)
		}
		reserve(false) // spent
		c = store.BudgetClock{Now: 5000, Day: 8000, Month: 9000, Until: 6000}
		if b := reserve(true); b.CreditsMicro != 0 || b.ResetsAt != 8000 {
			t.Fatalf("next day: %+v, want a fresh window resetting at 8000", b)
		}
		// The reservation lapses at 6000 unsettled: it no longer holds.
		c = store.BudgetClock{Now: 6000, Day: 8000, Month: 9000, Until: 7000}
		if b := reserve(true); b.Inflight != 1 {
			t.Fatalf("after the lapse: %+v, want only this reservation", b)
		}
		mustOK(t, s.SettleKeyBudget(ctx, k.ID, 2, c))
		mustOK(t, s.SetKeyBudget(ctx, k.ID, 20, store.BudgetDaily))
		if b, _ := s.GetKeyBudget(ctx, k.ID); b.CreditsMicro != 2 || b.LimitMicro != 20 {
			t.Fatalf("after raising the limit: %+v, want 2 used of 20", b)
		}
		mustOK(t, s.SetKeyBudget(ctx, k.ID, 20, store.BudgetLifetime))
		if b, _ := s.GetKeyBudget(ctx, k.ID); b.CreditsMicro != 0 || b.BudgetWindow != store.BudgetLifetime {
			t.Fatalf("after changing the window: %+v, want a new lifetime window", b)
		}
		if b := reserve(true); b.ResetsAt != 0 {
			t.Fatalf("lifetime: %+v, want no reset", b)
		}
		mustOK(t, s.ClearKeyBudget(ctx, k.ID))
		if b, ok, err := s.ReserveKeyBudget(ctx, k.ID, c); ok || err != nil || b.KeyID != "" {
			t.Fatalf("without a budget: %+v %v %v, want not reserved and no row", b, ok, err)
		}
	})
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
