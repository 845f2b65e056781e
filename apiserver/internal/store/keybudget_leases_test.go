package store_test

import (
	"context"
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
)

// Budget leases on both dialects: a lease is granted only while the used
// credits, every lease and the reservations in flight stay within the
// limit; a lease counts as spent for the per-request reservation; settling
// from a lease releases what the cost used of it; returning gives the rest
// back; a settlement or return of a closed window's lease releases nothing
// of the new window's; a lapsed lease (its replica died) no longer holds.
func TestKeyBudgetLeaseStatements(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		w, u := fixture(t, s)
		k, err := s.CreateAPIKey(ctx, store.APIKey{Credential: store.Credential{ID: "kl1", Prefix: "p"},
			WorkspaceID: w.ID, UserID: u.ID, KeyHash: "h"})
		if err != nil {
			t.Fatal(err)
		}
		mustOK(t, s.SetKeyBudget(ctx, k.ID, 100, store.BudgetDaily))
		c := store.BudgetClock{Now: 1000, Day: 5000, Month: 9000, Until: 4000}
		row := func() store.KeyBudget {
			t.Helper()
			b, err := s.GetKeyBudget(ctx, k.ID)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		reserve := func(want bool) func() error {
			return func() error {
				if _, ok, err := s.ReserveKeyBudget(ctx, k.ID, c); ok != want || err != nil {
					t.Errorf("reservation granted %v (want %v): %v", ok, want, err)
				}
				return nil
			}
		}
		for _, step := range []struct {
			name   string
			do     func() error
			n      int64           // a lease of n (0: the step does)
			leased bool            // the lease is granted
			want   store.KeyBudget // CreditsMicro, LeasedMicro, Inflight
		}{
			{name: "lease 40", n: 40, leased: true, want: store.KeyBudget{LeasedMicro: 40}},
			{name: "lease 50", n: 50, leased: true, want: store.KeyBudget{LeasedMicro: 90}},
			{name: "lease 11 passes the limit", n: 11, want: store.KeyBudget{LeasedMicro: 90}},
			{name: "settle 30 from a lease", do: func() error { return s.SettleLeasedKeyBudget(ctx, k.ID, 30, 30, 30, 5000, c) },
				want: store.KeyBudget{CreditsMicro: 30, LeasedMicro: 60}},
			{name: "return 10", do: func() error { return s.ReturnKeyBudgetLease(ctx, k.ID, 10, 5000, c) },
				want: store.KeyBudget{CreditsMicro: 30, LeasedMicro: 50}},
			{name: "reserve alone (nothing in flight, 30 + 50 < 100)", do: reserve(true),
				want: store.KeyBudget{CreditsMicro: 30, LeasedMicro: 50, Inflight: 1}},
			{name: "reserve: 30 + 50 + 2×30 > 100", do: reserve(false),
				want: store.KeyBudget{CreditsMicro: 30, LeasedMicro: 50, Inflight: 1}},
			{name: "return 40", do: func() error { return s.ReturnKeyBudgetLease(ctx, k.ID, 40, 5000, c) },
				want: store.KeyBudget{CreditsMicro: 30, LeasedMicro: 10, Inflight: 1}},
			{name: "reserve: 30 + 10 + 2×30 ≤ 100", do: reserve(true),
				want: store.KeyBudget{CreditsMicro: 30, LeasedMicro: 10, Inflight: 2}},
			{name: "return more than leased: none left", do: func() error { return s.ReturnKeyBudgetLease(ctx, k.ID, 50, 5000, c) },
				want: store.KeyBudget{CreditsMicro: 30, Inflight: 2}},
			{name: "lease 11: 30 + 2×30 + 11 > 100", n: 11, want: store.KeyBudget{CreditsMicro: 30, Inflight: 2}},
			{name: "lease 10: 30 + 2×30 + 10 ≤ 100", n: 10, leased: true,
				want: store.KeyBudget{CreditsMicro: 30, LeasedMicro: 10, Inflight: 2}},
			{name: "a return of another window's lease", do: func() error { return s.ReturnKeyBudgetLease(ctx, k.ID, 10, 4999, c) },
				want: store.KeyBudget{CreditsMicro: 30, LeasedMicro: 10, Inflight: 2}},
		} {
			if step.n > 0 {
				b, ok, err := s.LeaseKeyBudget(ctx, k.ID, step.n, c)
				if err != nil || ok != step.leased {
					t.Fatalf("%s: granted %v, %v (want %v)", step.name, ok, err, step.leased)
				}
				if ok && (b.LeasedMicro != step.want.LeasedMicro || b.ResetsAt != 5000 || b.LeasedUntil != 4000) {
					t.Fatalf("%s: returned %+v", step.name, b)
				}
			} else if err := step.do(); err != nil {
				t.Fatalf("%s: %v", step.name, err)
			}
			b := row()
			if b.CreditsMicro != step.want.CreditsMicro || b.LeasedMicro != step.want.LeasedMicro || b.Inflight != step.want.Inflight {
				t.Fatalf("%s: row %+v; want used %d leased %d in flight %d", step.name, b,
					step.want.CreditsMicro, step.want.LeasedMicro, step.want.Inflight)
			}
		}

		// Lapsed: past leased_until the leases no longer hold, and a new
		// lease starts from none.
		late := store.BudgetClock{Now: 4000, Day: 5000, Month: 9000, Until: 4500}
		if b, ok, err := s.LeaseKeyBudget(ctx, k.ID, 70, late); err != nil || !ok || b.LeasedMicro != 70 {
			t.Fatalf("lease after the others lapsed: %+v %v %v; want 70 leased", b, ok, err)
		}
		// The next day: the window's credits and leases start at zero; the
		// old window's settlement releases nothing of the new leases.
		next := store.BudgetClock{Now: 6000, Day: 10000, Month: 9000, Until: 8000}
		if b, ok, err := s.LeaseKeyBudget(ctx, k.ID, 100, next); err != nil || !ok || b.LeasedMicro != 100 || b.CreditsMicro != 0 || b.ResetsAt != 10000 {
			t.Fatalf("lease of the next window: %+v %v %v", b, ok, err)
		}
		mustOK(t, s.SettleLeasedKeyBudget(ctx, k.ID, 5, 5, 5, 5000, next))
		if b := row(); b.CreditsMicro != 5 || b.LeasedMicro != 100 {
			t.Fatalf("an old window's settlement: %+v; want 5 used, 100 still leased", b)
		}
	})
}
