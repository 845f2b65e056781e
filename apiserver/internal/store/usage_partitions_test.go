package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
)

// On PostgreSQL usage records land in day partitions (made ahead by the
// maintenance, or on demand); retention detaches and drops the expired
// ones, and the daily aggregates — what the totals read — survive it.
func TestUsagePartitionsAndRetention(t *testing.T) {
	t.Parallel()
	s := storetest.Postgres(t)
	ctx := context.Background()
	ws, err := s.CreateWorkspace(ctx, "partitions", "free")
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, 30) // days no partition covers yet
	got, err := s.MaintainUsagePartitions(ctx, base, 0)
	if err != nil || len(got.Created) != store.PartitionsAhead+1 || len(got.Dropped) != 0 {
		t.Fatalf("maintenance: %+v, %v; want %d days created", got, err, store.PartitionsAhead+1)
	}
	if again, err := s.MaintainUsagePartitions(ctx, base, 0); err != nil || len(again.Created) != 0 {
		t.Fatalf("second run: %+v, %v; want nothing to do", again, err)
	}
	win := []store.WindowSpec{{Name: "5h", Duration: 5 * time.Hour}}
	// Day 1 (made ahead) and day 20 (on demand, past what was made).
	for i, day := range []int{1, 20} {
		at := base.AddDate(0, 0, day).Add(time.Hour)
		rec := store.UsageRecord{RequestID: fmt.Sprintf("r%d", i), WorkspaceID: ws.ID, Model: "m", PromptTokens: 5, CreditsMicro: 7, CreatedAt: at}
		if err := s.RecordUsageBatch(ctx, []store.UsageRecord{rec}, [][]store.WindowSpec{win}, at); err != nil {
			t.Fatalf("day %d: %v", day, err)
		}
	}
	part := func(day int) string { return "usage_records_" + base.AddDate(0, 0, day).Format("20060102") }
	var where string
	if err := s.DB().QueryRowContext(ctx, `SELECT tableoid::regclass::text FROM usage_records WHERE request_id = 'r1'`).Scan(&where); err != nil || where != part(20) {
		t.Fatalf("the day-20 record is in %q (%v), want %s", where, err, part(20))
	}
	// Ten days of retention, seen from day 25: every partition before day 15 goes.
	res, err := s.MaintainUsagePartitions(ctx, base.AddDate(0, 0, 25), 10*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, day := range []int{0, 1, 7} {
		if !slices.Contains(res.Dropped, part(day)) {
			t.Errorf("%s not dropped: %+v", part(day), res)
		}
	}
	if slices.Contains(res.Dropped, part(20)) {
		t.Errorf("%s dropped inside the retention", part(20))
	}
	var rows int
	if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM usage_records WHERE workspace_id = $1`, ws.ID).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("%d records left (%v), want the day-20 one", rows, err)
	}
	tot, err := s.SumUsage(ctx, ws.ID)
	if err != nil || tot.Requests != 2 || tot.PromptTokens != 10 || tot.CreditsMicro != 14 {
		t.Fatalf("totals after retention %+v (%v): the daily aggregates keep both requests", tot, err)
	}
}
