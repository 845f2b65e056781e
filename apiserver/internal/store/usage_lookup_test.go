package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
)

// The usage writer's check for records already written probes the request
// id index per record: a batch written beside a day's worth of rows the
// planner has no statistics for yet (a partition growing faster than
// autovacuum analyzes it) reads a handful of rows, not the partition.
func TestRecordUsageBatchLookupReadsNoPartition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := storetest.Postgres(t)
	db := s.DB()
	db.SetMaxOpenConns(1) // one backend, so its counters are the meter's
	db.SetMaxIdleConns(1)
	ws, err := s.CreateWorkspace(ctx, "lookup", "free")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	const filled = 20_000
	if _, err := db.ExecContext(ctx, `INSERT INTO usage_records (request_id, workspace_id, model, created_at)
SELECT 'old-' || g, $1, 'm', $2::timestamptz - g * interval '1 ms' FROM generate_series(1, $3) g`,
		ws.ID, now, filled); err != nil {
		t.Fatal(err)
	}
	const batch = 150 // a full batch of the recorder at load
	recs := make([]store.UsageRecord, batch)
	wins := make([][]store.WindowSpec, batch)
	for i := range recs {
		recs[i] = store.UsageRecord{RequestID: fmt.Sprintf("new-%d", i), WorkspaceID: ws.ID, Model: "m",
			PromptTokens: 1, CreditsMicro: 1, CreatedAt: now.Add(time.Duration(i) * time.Microsecond)}
		wins[i] = []store.WindowSpec{{Name: "5h", Duration: 5 * time.Hour}}
	}
	m := storetest.NewPGMeter(ctx, t, db)
	var werr error
	d := m.Measure(ctx, t, func() { werr = s.RecordUsageBatch(ctx, recs, wins, now) })
	if werr != nil {
		t.Fatal(werr)
	}
	if d.Inserted < batch {
		t.Fatalf("the batch inserted %d rows, want at least %d", d.Inserted, batch)
	}
	// The old IN-list lookup was planned as a sequential scan here and read
	// all 20,000 rows; the probes read none by sequential scan.
	if d.SeqRows >= filled/10 {
		t.Fatalf("writing %d records read %d rows by sequential scan (of %d in the partition): the lookup scans", batch, d.SeqRows, filled)
	}
	// Written again (a retried batch): nothing is inserted.
	d = m.Measure(ctx, t, func() { werr = s.RecordUsageBatch(ctx, recs, wins, now) })
	if werr != nil {
		t.Fatal(werr)
	}
	if d.Inserted != 0 || d.SeqRows >= filled/10 {
		t.Fatalf("the retried batch inserted %d rows and read %d by sequential scan, want 0 and few", d.Inserted, d.SeqRows)
	}
	// A batch's first attempt skips the check; its retry (the attempt's
	// commit succeeded, its acknowledgement was lost) still adds nothing.
	for i := range recs {
		recs[i].RequestID = fmt.Sprintf("first-%d", i)
	}
	if err := s.RecordNewUsageBatch(ctx, recs, wins, now); err != nil {
		t.Fatal(err)
	}
	d = m.Measure(ctx, t, func() { werr = s.RecordUsageBatch(ctx, recs, wins, now) })
	if werr != nil {
		t.Fatal(werr)
	}
	if d.Inserted != 0 {
		t.Fatalf("retrying a batch written by its first attempt inserted %d rows, want 0", d.Inserted)
	}
	var rows int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM usage_records WHERE request_id LIKE 'first-%'").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != batch {
		t.Fatalf("%d rows of the first attempt's batch, want %d", rows, batch)
	}
}
