package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
)

// BenchmarkRecordUsageBatch is the usage writer's transaction for a batch
// of 100 records (the Recorder's at about 5,000 requests a second): ns/op
// and allocs/op per batch, on PostgreSQL.
func BenchmarkRecordUsageBatch(b *testing.B) {
	s := storetest.Postgres(b)
	ctx := context.Background()
	ws, err := s.CreateWorkspace(ctx, "bench", "free")
	if err != nil {
		b.Fatal(err)
	}
	key := "key_bench"
	win := []store.WindowSpec{{Name: "5h", Duration: 5 * time.Hour}, {Name: "month", Duration: 720 * time.Hour}}
	const n = 100
	wins := make([][]store.WindowSpec, n)
	for i := range wins {
		wins[i] = win
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		now := time.Now()
		recs := make([]store.UsageRecord, n)
		for j := range recs {
			recs[j] = store.UsageRecord{RequestID: fmt.Sprintf("req-%d-%d", i, j), WorkspaceID: ws.ID, APIKeyID: &key,
				Model: "m", Deployment: "p/up", PromptTokens: 10, CompletionTokens: 20, CreditsMicro: 330, CreatedAt: now}
		}
		if err := s.RecordUsageBatch(ctx, recs, wins, now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAdmitLease is admission's round trip when a replica leases rate
// permits and reads the workspace's windows (once per block of permits).
func BenchmarkAdmitLease(b *testing.B) {
	s := storetest.Postgres(b)
	ctx := context.Background()
	ws, err := s.CreateWorkspace(ctx, "bench", "free")
	if err != nil {
		b.Fatal(err)
	}
	incr := []store.RateIncrement{{Bucket: "key:bench", N: 64}, {Bucket: "ws:" + ws.ID, N: 64}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Admit(ctx, 60_000, incr, ws.ID, true); err != nil {
			b.Fatal(err)
		}
	}
}
