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
//
// SVC_BENCH_USAGE_DATABASE_URL names a migrated PostgreSQL database that
// is kept between runs: the rows are added to its workspace "bench-usage"
// only up to SVC_BENCH_USAGE_ROWS (nothing when it has them), so the fill
// can run once while the machine is busy and the timing later on a quiet
// one. The empty database is a fresh test database either way.
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
	run := time.Now().UnixNano() // request ids of this run's writes: new in a kept database too
	for _, db := range []struct {
		name string
		rows int64
	}{{"empty", 0}, {fmt.Sprintf("rows=%d", rows), rows}} {
		var (
			s  *store.Store
			ws string
		)
		if url := os.Getenv("SVC_BENCH_USAGE_DATABASE_URL"); url != "" && db.rows > 0 {
			s, ws = keptUsageDB(b, url)
		} else {
			s = storetest.Postgres(b)
			w, err := s.CreateWorkspace(ctx, "bench", "free")
			if err != nil {
				b.Fatal(err)
			}
			ws = w.ID
		}
		if db.rows > 0 {
			fillUsage(b, s, ws, db.rows)
		}
		win := []store.WindowSpec{{Name: "5h", Duration: 5 * time.Hour}}
		n := 0
		b.Run(db.name+"/record", func(b *testing.B) {
			for range b.N {
				n++
				now := time.Now()
				rec := store.UsageRecord{RequestID: fmt.Sprintf("bench-new-%d-%d", run, n), WorkspaceID: ws, Model: "m",
					PromptTokens: 10, CreditsMicro: 100, CreatedAt: now}
				if err := s.RecordUsageBatch(ctx, []store.UsageRecord{rec}, [][]store.WindowSpec{win}, now); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(db.name+"/admit", func(b *testing.B) {
			for range b.N {
				win := time.Now().Truncate(time.Minute).UnixMilli()
				if _, err := s.Admit(ctx, win, []store.RateIncrement{{Bucket: "key:bench", N: 1}}, ws, true); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(db.name+"/totals", func(b *testing.B) {
			for range b.N {
				if _, err := s.SumUsage(ctx, ws); err != nil {
					b.Fatal(err)
				}
				if _, err := s.UsageByDay(ctx, ws, time.Now().AddDate(0, 0, -30)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
