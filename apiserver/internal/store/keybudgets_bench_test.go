package store_test

import (
	"context"
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
)

// BenchmarkKeyBudgetReserveSettle is one reservation and one settlement of
// a budgeted key on PostgreSQL: the two statements every request of such a
// key runs (allocations per op are the figure to watch; the time is the
// database's round trips).
func BenchmarkKeyBudgetReserveSettle(b *testing.B) {
	s := storetest.Postgres(b)
	ctx := context.Background()
	w, err := s.CreateWorkspace(ctx, "acme", "free")
	if err != nil {
		b.Fatal(err)
	}
	u, err := s.CreateUser(ctx, "bench@acme.test")
	if err != nil {
		b.Fatal(err)
	}
	k, err := s.CreateAPIKey(ctx, store.APIKey{Credential: store.Credential{ID: "kbench", Prefix: "p"},
		WorkspaceID: w.ID, UserID: u.ID, KeyHash: "h"})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.SetKeyBudget(ctx, k.ID, 1<<60, store.BudgetMonthly); err != nil {
		b.Fatal(err)
	}
	c := store.BudgetClock{Now: 1000, Day: 5000, Month: 9000, Until: 4000}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok, err := s.ReserveKeyBudget(ctx, k.ID, c); err != nil || !ok {
			b.Fatalf("reserve: %v %v", ok, err)
		}
		if err := s.SettleKeyBudget(ctx, k.ID, 10, c); err != nil {
			b.Fatal(err)
		}
	}
}
