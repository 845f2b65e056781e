package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/svc-dev/svc/apiserver/internal/store"
)

// keptUsageDB opens the kept database at url (migrated up first) and
// returns its workspace "bench-usage", created when missing.
func keptUsageDB(b *testing.B, url string) (*store.Store, string) {
	b.Helper()
	ctx := context.Background()
	s, err := store.Open(url, "")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	var ws string
	err = s.DB().QueryRowContext(ctx, `SELECT id FROM workspaces WHERE name = 'bench-usage' ORDER BY id LIMIT 1`).Scan(&ws)
	if errors.Is(err, sql.ErrNoRows) {
		w, err := s.CreateWorkspace(ctx, "bench-usage", "free")
		if err != nil {
			b.Fatal(err)
		}
		return s, w.ID
	}
	if err != nil {
		b.Fatal(err)
	}
	return s, ws
}

// usageFillDays is how many days before today the fill spreads over.
const usageFillDays = 90

// migratedLongAgo gives s the partitions of a database migrated before
// start: the legacy partition ends at start, so the fill's days and today
// each land in a day partition of their own, as in production from the day
// after the migration (in a database migrated today the legacy partition
// covers today and every earlier day). Only an empty legacy partition is
// bound anew — detached and attached again, which the migration permits
// since the partition is a plain table — so a kept database whose legacy
// partition holds rows of the fill window is refused: drop it and fill it
// again.
func migratedLongAgo(b *testing.B, s *store.Store, start time.Time) {
	b.Helper()
	ctx := context.Background()
	var bound sql.NullString
	if err := s.DB().QueryRowContext(ctx, `SELECT pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'usage_records'::regclass AND c.relname = 'usage_records_legacy'`).Scan(&bound); errors.Is(err, sql.ErrNoRows) {
		return // dropped by retention
	} else if err != nil {
		b.Fatal(err)
	}
	want := fmt.Sprintf("FOR VALUES FROM (MINVALUE) TO ('%s')", start.Format("2006-01-02 15:04:05-07"))
	var ends bool
	if err := s.DB().QueryRowContext(ctx, `SELECT $1::text LIKE 'FOR VALUES FROM (MINVALUE) TO (''%'')'
  AND substring($1::text from 'TO \(''([^'']+)''\)')::timestamptz <= $2`, bound.String, start).Scan(&ends); err != nil {
		b.Fatal(err)
	}
	if ends {
		return
	}
	var rows bool
	if err := s.DB().QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM usage_records_legacy)`).Scan(&rows); err != nil {
		b.Fatal(err)
	}
	if rows {
		b.Fatalf("the legacy partition (%s) holds rows and covers the fill window: drop the database and fill it again", bound.String)
	}
	for _, q := range []string{`ALTER TABLE usage_records DETACH PARTITION usage_records_legacy`,
		`ALTER TABLE usage_records ATTACH PARTITION usage_records_legacy ` + want} {
		if _, err := s.DB().ExecContext(ctx, q); err != nil {
			b.Fatalf("%s: %v", q, err)
		}
	}
}

// fillUsage makes ws hold at least rows usage records over the last 90
// days and their daily aggregates. The fill records are counted (in
// usage_daily, which holds them exactly: no scan of usage_records) and
// only the missing ones are written, so a kept database is filled once.
//
// The fill is one INSERT … SELECT generate_series per day (days in
// parallel, a connection per CPU),
// with the table's index dropped during the fill and built again
// after it (with the names every partition had), and the foreign-key
// check per row skipped (session_replication_role = replica, when the
// role may set it: the rows name the one workspace, which exists). What
// is timed after it is the same indexed table. A fill stopped half-way
// leaves a kept database to be dropped and made again (its aggregates are
// written last, so the records it holds are not all counted).
func fillUsage(b *testing.B, s *store.Store, ws string, rows int64) {
	b.Helper()
	ctx := context.Background()
	var have int64
	if err := s.DB().QueryRowContext(ctx, `SELECT coalesce(sum(requests), 0) FROM usage_daily
WHERE workspace_id = $1 AND model LIKE 'fill%'`, ws).Scan(&have); err != nil {
		b.Fatal(err)
	}
	if have >= rows {
		b.Logf("the workspace has %d fill records already (%d asked): no fill", have, rows)
		return
	}
	now := time.Now().UTC()
	start := now.Truncate(24*time.Hour).AddDate(0, 0, -usageFillDays)
	for d := start; d.Before(now); d = d.AddDate(0, 0, store.PartitionsAhead) {
		if _, err := s.MaintainUsagePartitions(ctx, d, 0); err != nil {
			b.Fatal(err)
		}
	}
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	exec := func(q string, args ...any) {
		b.Helper()
		if _, err := conn.ExecContext(ctx, q, args...); err != nil {
			b.Fatalf("%s: %v", q, err)
		}
	}
	began := time.Now()
	exec(`SET maintenance_work_mem = '1GB'`)
	noFKCheck := true
	if _, err := conn.ExecContext(ctx, `SET session_replication_role = replica`); err != nil {
		b.Logf("foreign-key checks stay on during the fill: %v", err)
		noFKCheck = false
	}
	// The indexes of every partition, to build them again with their names.
	type index struct{ table, name, def string }
	var idx []index
	rs, err := conn.QueryContext(ctx, `SELECT t.relname, i.relname, pg_get_indexdef(i.oid)
FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
WHERE t.relname = 'usage_records' OR t.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'usage_records'::regclass)`)
	if err != nil {
		b.Fatal(err)
	}
	for rs.Next() {
		var ix index
		if err := rs.Scan(&ix.table, &ix.name, &ix.def); err != nil {
			b.Fatal(err)
		}
		idx = append(idx, ix)
	}
	rs.Close()
	exec(`DROP INDEX IF EXISTS usage_records_request_idx`)

	// Each of the 90 days gets its share, in time order; the request ids
	// continue after the records already there.
	missing := rows - have
	const days = usageFillDays
	next := have + 1
	type daily struct {
		day, model string
		n          int64
	}
	var added []daily
	type day struct {
		from     time.Time
		first, n int64
	}
	var jobs []day
	for d := 0; d < days; d++ {
		n := missing / days
		if int64(d) < missing%days {
			n++
		}
		if n == 0 {
			continue
		}
		from := start.AddDate(0, 0, d)
		jobs = append(jobs, day{from, next, n})
		for k := int64(0); k < 3; k++ {
			// ids g in [next, next+n) with g % 3 == k
			c := countMod(next+n-1, k) - countMod(next-1, k)
			if c > 0 {
				added = append(added, daily{day: from.Format("2006-01-02"), model: fmt.Sprintf("fill%d", k), n: c})
			}
		}
		next += n
	}
	// The days are written by one connection per CPU.
	queue := make(chan day, len(jobs))
	for _, j := range jobs {
		queue <- j
	}
	close(queue)
	g, gctx := errgroup.WithContext(ctx)
	for range runtime.GOMAXPROCS(0) {
		g.Go(func() error {
			c, err := s.DB().Conn(gctx)
			if err != nil {
				return err
			}
			defer c.Close()
			if noFKCheck {
				if _, err := c.ExecContext(gctx, `SET session_replication_role = replica`); err != nil {
					return err
				}
				defer c.ExecContext(context.WithoutCancel(gctx), `RESET session_replication_role`) //nolint:errcheck // the connection goes back clean or fails
			}
			for j := range queue {
				if _, err := c.ExecContext(gctx, `INSERT INTO usage_records
  (request_id, workspace_id, model, deployment, prompt_tokens, completion_tokens, credits_micro, created_at)
SELECT 'fill-' || g, $1, 'fill' || (g % 3), 'main/up', 10, 5, 100,
  $2::timestamptz + ((g - $3) * 86400000000 / $4) * interval '1 microsecond'
FROM generate_series($3::bigint, $3::bigint + $4 - 1) g`, ws, j.from, j.first, j.n); err != nil {
					return fmt.Errorf("filling %s: %w", j.from.Format("2006-01-02"), err)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	filled := time.Since(began)
	exec(`CREATE INDEX usage_records_request_idx ON usage_records (request_id)`)
	// Partition indexes come back under generated names: give each its own.
	for _, ix := range idx {
		if ix.table == "usage_records" {
			continue
		}
		var cur string
		err := conn.QueryRowContext(ctx, `SELECT i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
WHERE x.indrelid = $1::regclass AND pg_get_indexdef(i.oid) = replace($2, $3, i.relname)`, ix.table, ix.def, ix.name).Scan(&cur)
		if err != nil {
			b.Fatalf("the index %s of %s after the fill: %v", ix.name, ix.table, err)
		}
		if cur != ix.name {
			exec(`ALTER INDEX ` + cur + ` RENAME TO ` + ix.name)
		}
	}
	indexed := time.Since(began) - filled
	// The same indexed table: the index on every partition.
	var parts, attached int
	if err := conn.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM pg_inherits WHERE inhparent = 'usage_records'::regclass),
  (SELECT count(*) FROM pg_inherits WHERE inhparent = 'usage_records_request_idx'::regclass)`).Scan(&parts, &attached); err != nil || attached != parts {
		b.Fatalf("after the fill: %d partition indexes for %d partitions (%v), want one each", attached, parts, err)
	}
	if noFKCheck {
		exec(`RESET session_replication_role`)
	}
	exec(`RESET maintenance_work_mem`)
	// The daily aggregates of what was added, from the same arithmetic
	// (each day's records are fill0..fill2 by id modulo 3), added to
	// what the days hold: no scan of usage_records.
	for _, a := range added {
		exec(`INSERT INTO usage_daily (workspace_id, day, model, deployment, requests, prompt_tokens, completion_tokens, credits_micro)
VALUES ($1, $2, $3, 'main/up', $4::bigint, $4::bigint * 10, $4::bigint * 5, $4::bigint * 100)
ON CONFLICT (workspace_id, day, model, deployment) DO UPDATE SET requests = usage_daily.requests + excluded.requests,
  prompt_tokens = usage_daily.prompt_tokens + excluded.prompt_tokens,
  completion_tokens = usage_daily.completion_tokens + excluded.completion_tokens,
  credits_micro = usage_daily.credits_micro + excluded.credits_micro`, ws, a.day, a.model, a.n)
	}
	// Vacuumed as a database's old days are (visibility map, hint bits):
	// no autovacuum of the fill runs under a later timing.
	exec(`VACUUM (ANALYZE) usage_records`)
	exec(`ANALYZE usage_daily`)
	took := time.Since(began)
	var total int64
	if err := s.DB().QueryRowContext(ctx, `SELECT coalesce(sum(requests), 0) FROM usage_daily
WHERE workspace_id = $1 AND model LIKE 'fill%'`, ws).Scan(&total); err != nil || total != rows {
		b.Fatalf("the daily aggregates count %d fill records (%v), want %d", total, err, rows)
	}
	b.Logf("filled %d usage records (%d there before) in %v: inserts %v, indexes %v, aggregates and vacuum %v; %.1f s per million",
		missing, have, took.Round(time.Second), filled.Round(time.Second), indexed.Round(time.Second),
		(took - filled - indexed).Round(time.Second), took.Seconds()/float64(missing)*1e6)
}

// countMod is how many of 1..x are k modulo 3.
func countMod(x, k int64) int64 {
	if x < 1 {
		return 0
	}
	if k == 0 {
		return x / 3
	}
	if x < k {
		return 0
	}
	return (x-k)/3 + 1
}
