package store_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
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

// Days made on demand by several replicas' requests at once — a day no
// partition covers, and a day the legacy partition covers — are made
// once, without an error, and leave no stray table; no table of
// usage_records has a foreign key to workspaces (migration 00024), so
// creating and dropping a day locks nothing a workspace's reader waits on;
// and a usage write for a workspace that does not exist still fails.
func TestUsageDaysMadeConcurrently(t *testing.T) {
	t.Parallel()
	url := storetest.PostgresURL(t)
	ctx := context.Background()
	var replicas []*store.Store
	for range 3 {
		s, err := store.Open(url, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		replicas = append(replicas, s)
	}
	s := replicas[0]
	ws, err := s.CreateWorkspace(ctx, "days", "free")
	if err != nil {
		t.Fatal(err)
	}
	ahead := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, 40).Add(time.Hour) // no partition yet
	legacy := time.Date(2020, 1, 1, 1, 0, 0, 0, time.UTC)                             // the legacy partition's
	win := []store.WindowSpec{{Name: "5h", Duration: 5 * time.Hour}}
	var wg sync.WaitGroup
	errs := make(chan error, 24)
	for i := range 24 {
		r := replicas[i%len(replicas)]
		at := ahead
		if i%2 == 1 {
			at = legacy
		}
		wg.Go(func() {
			rec := store.UsageRecord{RequestID: fmt.Sprintf("c%d", i), WorkspaceID: ws.ID, Model: "m", PromptTokens: 1, CreatedAt: at}
			errs <- r.RecordUsageBatch(ctx, []store.UsageRecord{rec}, [][]store.WindowSpec{win}, at)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a concurrent usage write: %v", err)
		}
	}
	for day, want := range map[time.Time]string{ahead: "usage_records_" + ahead.Format("20060102"), legacy: "usage_records_legacy"} {
		var n int
		if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM usage_records WHERE workspace_id = $1 AND created_at = $2 AND tableoid = $3::regclass`,
			ws.ID, day, want).Scan(&n); err != nil || n != 12 {
			t.Errorf("%d records of %v in %s (%v), want 12", n, day, want, err)
		}
	}
	// A usage write naming no workspace still fails, with nothing written:
	// the same transaction adds to usage_daily, whose key stays.
	bad := store.UsageRecord{RequestID: "nows", WorkspaceID: "ws_none", Model: "m", PromptTokens: 1, CreatedAt: ahead}
	if err := s.RecordUsageBatch(ctx, []store.UsageRecord{bad}, [][]store.WindowSpec{win}, ahead); err == nil {
		t.Error("a usage write for a workspace that does not exist succeeded")
	}
	var orphans int
	if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM usage_records WHERE request_id = 'nows'`).Scan(&orphans); err != nil || orphans != 0 {
		t.Errorf("%d records of the refused write (%v), want none", orphans, err)
	}
	var stray bool
	if err := s.DB().QueryRowContext(ctx, `SELECT to_regclass('usage_records_20200101') IS NOT NULL`).Scan(&stray); err != nil || stray {
		t.Errorf("a table usage_records_20200101 is left (%v): the legacy partition covers the day", err)
	}
	var fks []string
	rows, err := s.DB().QueryContext(ctx, `SELECT conrelid::regclass::text FROM pg_constraint WHERE contype = 'f'
AND confrelid = 'workspaces'::regclass AND conrelid::regclass::text LIKE 'usage\_records%'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var rel string
		if err := rows.Scan(&rel); err != nil {
			t.Fatal(err)
		}
		fks = append(fks, rel)
	}
	if err := rows.Err(); err != nil || len(fks) != 0 {
		t.Fatalf("foreign keys to workspaces on %v (%v), want none", fks, err)
	}
}
