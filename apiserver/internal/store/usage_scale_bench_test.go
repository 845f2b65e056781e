package store_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
)

// BenchmarkUsageAtScale times what the request path and the console do
// with usage — a usage batch write, the admission read (rate counters and
// usage windows), the console's totals — on an empty database and on one
// whose workspace has SVC_BENCH_USAGE_ROWS usage records (default 100,000)
// spread over 90 days, in the same run (docs/gateway.md, Usage at scale).
// Run big loads only on a machine of their own:
//
//	SVC_BENCH_USAGE_ROWS=100000000 go test -run '^$' -bench BenchmarkUsageAtScale -benchtime 2000x ./internal/store/
func BenchmarkUsageAtScale(b *testing.B) {
	rows := int64(100_000)
	if v := os.Getenv("SVC_BENCH_USAGE_ROWS"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		rows = n
	}
	ctx := context.Background()
	for _, db := range []struct {
		name string
		rows int64
	}{{"empty", 0}, {fmt.Sprintf("rows=%d", rows), rows}} {
		s := storetest.Postgres(b)
		ws, err := s.CreateWorkspace(ctx, "bench", "free")
		if err != nil {
			b.Fatal(err)
		}
		if db.rows > 0 {
			fillUsage(b, s, ws.ID, db.rows)
		}
		win := []store.WindowSpec{{Name: "5h", Duration: 5 * time.Hour}}
		n := 0
		b.Run(db.name+"/record", func(b *testing.B) {
			for range b.N {
				n++
				now := time.Now()
				rec := store.UsageRecord{RequestID: fmt.Sprintf("bench-new-%d", n), WorkspaceID: ws.ID, Model: "m",
					PromptTokens: 10, CreditsMicro: 100, CreatedAt: now}
				if err := s.RecordUsageBatch(ctx, []store.UsageRecord{rec}, [][]store.WindowSpec{win}, now); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(db.name+"/admit", func(b *testing.B) {
			for range b.N {
				win := time.Now().Truncate(time.Minute).UnixMilli()
				if _, err := s.Admit(ctx, win, []store.RateIncrement{{Bucket: "key:bench", N: 1}}, ws.ID, true); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(db.name+"/totals", func(b *testing.B) {
			for range b.N {
				if _, err := s.SumUsage(ctx, ws.ID); err != nil {
					b.Fatal(err)
				}
				if _, err := s.UsageByDay(ctx, ws.ID, time.Now().AddDate(0, 0, -30)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// fillUsage writes rows usage records of ws over the last 90 days (day
// partitions made first) and their daily aggregates, a million at a time.
func fillUsage(b *testing.B, s *store.Store, ws string, rows int64) {
	b.Helper()
	ctx := context.Background()
	start := time.Now().UTC().AddDate(0, 0, -90)
	for d := start; d.Before(time.Now()); d = d.AddDate(0, 0, store.PartitionsAhead) {
		if _, err := s.MaintainUsagePartitions(ctx, d, 0); err != nil {
			b.Fatal(err)
		}
	}
	const chunk = 1_000_000
	began := time.Now()
	for from := int64(1); from <= rows; from += chunk {
		to := min(from+chunk-1, rows)
		if _, err := s.DB().ExecContext(ctx, `INSERT INTO usage_records
  (request_id, workspace_id, model, deployment, prompt_tokens, completion_tokens, credits_micro, created_at)
SELECT 'fill-' || g, $1, 'm' || (g % 3), 'main/up', 10, 5, 100, now() - (g % 7776000) * interval '1 second'
FROM generate_series($2::bigint, $3::bigint) g`, ws, from, to); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO usage_daily (workspace_id, day, model, deployment, requests,
  prompt_tokens, completion_tokens, credits_micro)
SELECT workspace_id, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD'), model, deployment, count(*),
  sum(prompt_tokens), sum(completion_tokens), sum(credits_micro)
FROM usage_records WHERE workspace_id = $1 GROUP BY 1, 2, 3, 4`, ws); err != nil {
		b.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, `ANALYZE usage_records`); err != nil {
		b.Fatal(err)
	}
	b.Logf("filled %d usage records in %v", rows, time.Since(began).Round(time.Second))
}
