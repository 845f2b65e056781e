package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
)

// A batch written again (its commit succeeded, its acknowledgement was
// lost) adds no rows and no credits; a record with a repeated request id
// but its own time is another request and is written.
func TestRecordUsageBatchExactlyOnce(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		t.Parallel()
		ctx := context.Background()
		ws, err := s.CreateWorkspace(ctx, "exactly-once", "free")
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		at := now.Add(-time.Second).Add(123 * time.Nanosecond) // below the database's resolution
		batch := func() []store.UsageRecord {
			return []store.UsageRecord{
				{RequestID: "req-a", WorkspaceID: ws.ID, Model: "m", PromptTokens: 1, CreditsMicro: 10, CreatedAt: at},
				{RequestID: "req-b", WorkspaceID: ws.ID, Model: "m", PromptTokens: 2, CreditsMicro: 20, CreatedAt: at},
			}
		}
		win := []store.WindowSpec{{Name: "5h", Duration: 5 * time.Hour}}
		wins := [][]store.WindowSpec{win, win}
		for range 2 {
			if err := s.RecordUsageBatch(ctx, batch(), wins, now); err != nil {
				t.Fatal(err)
			}
		}
		// A client reusing its request id: another request.
		again := []store.UsageRecord{{RequestID: "req-a", WorkspaceID: ws.ID, Model: "m", PromptTokens: 4, CreditsMicro: 40,
			CreatedAt: at.Add(time.Millisecond)}}
		if err := s.RecordUsageBatch(ctx, again, [][]store.WindowSpec{win}, now); err != nil {
			t.Fatal(err)
		}
		tot, err := s.SumUsage(ctx, ws.ID)
		if err != nil {
			t.Fatal(err)
		}
		if tot.Requests != 3 || tot.PromptTokens != 7 || tot.CreditsMicro != 70 {
			t.Fatalf("totals %+v, want 3 requests, 7 prompt tokens, 70 credits", tot)
		}
		w, err := s.UsageWindows(ctx, ws.ID)
		if err != nil || len(w) != 1 || w[0].CreditsMicro != 70 {
			t.Fatalf("windows %+v (%v), want 70 credits once", w, err)
		}
	})
}
