package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/migrations"
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

// A batch larger than one INSERT (three statements) is written field for
// field on both databases: nullable ids as NULL or their value, the
// streamed flag, the creation time to the microsecond; the totals and the
// window count every record once.
func TestRecordUsageBatchFields(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		t.Parallel()
		ctx := context.Background()
		ws, err := s.CreateWorkspace(ctx, "fields", "free")
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		at := now.Add(-time.Minute).Truncate(time.Microsecond)
		key, project := "key_x", "prj_y"
		const n = 1201
		recs := make([]store.UsageRecord, n)
		wins := make([][]store.WindowSpec, n)
		for i := range recs {
			recs[i] = store.UsageRecord{RequestID: fmt.Sprintf("req-%d", i), WorkspaceID: ws.ID, Model: "m", Deployment: "p/up",
				PromptTokens: 1, CompletionTokens: 2, ReasoningTokens: 3, CachedTokens: 4, CacheWriteTokens: 5, CreditsMicro: 7,
				Streamed: i%2 == 1, CreatedAt: at}
			switch i % 3 {
			case 1:
				recs[i].APIKeyID = &key
			case 2:
				recs[i].ProjectID = &project
			}
			wins[i] = []store.WindowSpec{{Name: "5h", Duration: 5 * time.Hour}}
		}
		if err := s.RecordUsageBatch(ctx, recs, wins, now); err != nil {
			t.Fatal(err)
		}
		tot, err := s.SumUsage(ctx, ws.ID)
		if err != nil || tot.Requests != n || tot.CompletionTokens != 2*n || tot.CacheWriteTokens != 5*n || tot.CreditsMicro != 7*n {
			t.Fatalf("totals %+v (%v), want %d requests of each field once", tot, err, n)
		}
		if w, err := s.UsageWindows(ctx, ws.ID); err != nil || len(w) != 1 || w[0].CreditsMicro != 7*n {
			t.Fatalf("windows %+v (%v), want %d credits", w, err, 7*n)
		}
		rows, err := s.DB().QueryContext(ctx, `SELECT request_id, api_key_id, project_id, deployment, reasoning_tokens, cached_tokens,
  streamed, created_at FROM usage_records WHERE workspace_id = `+placeholder(s)+` ORDER BY id`, ws.ID)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		i := 0
		for ; rows.Next(); i++ {
			var r store.UsageRecord
			if err := rows.Scan(&r.RequestID, &r.APIKeyID, &r.ProjectID, &r.Deployment, &r.ReasoningTokens, &r.CachedTokens,
				&r.Streamed, &r.CreatedAt); err != nil {
				t.Fatal(err)
			}
			want := recs[i]
			if r.RequestID != want.RequestID || !samePtr(r.APIKeyID, want.APIKeyID) || !samePtr(r.ProjectID, want.ProjectID) ||
				r.Deployment != "p/up" || r.ReasoningTokens != 3 || r.CachedTokens != 4 || r.Streamed != want.Streamed ||
				!r.CreatedAt.Equal(at) {
				t.Fatalf("record %d read back as %+v, wrote %+v", i, r, want)
			}
		}
		if err := rows.Err(); err != nil || i != n {
			t.Fatalf("%d records read back (%v), want %d", i, err, n)
		}
	})
}

func samePtr(a, b *string) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

// placeholder is the first query parameter in s's dialect.
func placeholder(s *store.Store) string {
	if s.Dialect() == migrations.Postgres {
		return "$1"
	}
	return "?"
}
