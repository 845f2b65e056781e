package store

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/svc-dev/svc/migrations"
)

// Usage records on PostgreSQL are partitioned by UTC day on created_at
// (migration 00021; docs/gateway.md, "Usage at scale"): usage_records_legacy
// holds every row from before the migration, usage_records_YYYYMMDD one day
// each, usage_records_default what no partition takes (normally nothing).
// SQLite keeps one table and has nothing to maintain.

// ensureDays makes sure the day partitions of times exist before rows are
// written to them (normally MaintainUsagePartitions made them days ahead;
// this covers a database no replica maintained yet). Days known to exist
// are remembered; a day the legacy partition covers counts as existing.
func (s *Store) ensureDays(ctx context.Context, times []time.Time) error {
	if s.dialect != migrations.Postgres {
		return nil
	}
	for _, t := range times {
		day := t.UTC().Truncate(24 * time.Hour)
		if _, ok := s.usageDays.Load(day); ok {
			continue
		}
		if err := s.createDay(ctx, s.sqlDB, day); err != nil {
			return err
		}
		s.usageDays.Store(day, true)
	}
	return nil
}

// execer is a *sql.DB or *sql.Conn.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// createDay creates day's partition unless it exists or the legacy
// partition covers the day. The day is made a table of its own and then
// attached: ATTACH PARTITION takes SHARE UPDATE EXCLUSIVE on usage_records,
// which no request's insert or read waits on, where CREATE TABLE …
// PARTITION OF takes ACCESS EXCLUSIVE (the new table is empty: the attach
// checks no row and builds the parent's indexes on nothing).
func (s *Store) createDay(ctx context.Context, db execer, day time.Time) error {
	var err error
	// Two callers making the same day at once (requests of one replica,
	// or replicas) may see the table vanish under the attach (the other
	// dropped it: the legacy partition covers the day) or collide on its
	// creation; the next attempt finds the day made or covered.
	for range 5 {
		err = createDayOnce(ctx, db, day)
		if err == nil || !retryDay.MatchString(err.Error()) && !isUnique(err) {
			return err
		}
	}
	return err
}

// retryDay matches what a concurrent maker of the same day causes: the
// table gone (undefined_table) or made meanwhile (duplicate_table,
// duplicate_object: its row type).
var retryDay = regexp.MustCompile(`SQLSTATE (42P01|42P07|42710)`)

func createDayOnce(ctx context.Context, db execer, day time.Time) error {
	name := "usage_records_" + day.Format("20060102")
	// Catalog reads first, which lock nothing: a day that is there (a
	// replica's first write of each day comes here) or that the legacy
	// partition covers needs no ATTACH, whose lock waits on a running
	// DETACH … CONCURRENTLY and on another ATTACH.
	var attached bool
	var bound sql.NullString
	if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = to_regclass($1) AND inhparent = 'usage_records'::regclass),
  (SELECT pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
   WHERE i.inhparent = 'usage_records'::regclass AND c.relname = 'usage_records_legacy')`, name).Scan(&attached, &bound); err != nil {
		return err
	}
	if attached {
		return nil
	}
	if end, ok := partitionEnd("usage_records_legacy", bound.String); ok && day.Before(end) {
		return nil // the legacy partition covers the day
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+name+` (LIKE usage_records INCLUDING DEFAULTS)`); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, fmt.Sprintf(`ALTER TABLE usage_records ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')`,
		name, day.Format(time.RFC3339), day.AddDate(0, 0, 1).Format(time.RFC3339)))
	switch {
	case err == nil:
		return nil
	case strings.Contains(err.Error(), "is already a partition"):
		return nil // made by another caller, or earlier
	case strings.Contains(err.Error(), "would overlap"):
		// The legacy partition covers the day: the table made above is
		// no partition and never becomes one (it has no foreign key, so
		// dropping it locks nothing else).
		_, err := db.ExecContext(ctx, `DROP TABLE IF EXISTS `+name)
		return err
	}
	return err
}

// isPartition tells whether the table $1 is a partition of usage_records
// (a day's table that an interrupted createDay left unattached is not:
// the next createDay attaches it).
const isPartition = `SELECT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = to_regclass($1) AND inhparent = 'usage_records'::regclass)`

// PartitionsAhead is how many days of partitions exist ahead of today.
const PartitionsAhead = 7

var dayPartition = regexp.MustCompile(`^usage_records_(\d{8})$`)

// UsagePartitions reports what MaintainUsagePartitions did.
type UsagePartitions struct {
	Created []string `json:"created"`
	Dropped []string `json:"dropped"`
}

// MaintainUsagePartitions creates the day partitions of usage_records from
// today to PartitionsAhead days ahead, and, when retention > 0, detaches and
// drops the partitions wholly older than now - retention (the legacy
// partition too, once its newest possible row is). A partition is detached
// CONCURRENTLY (no lock a request's insert waits on) and then dropped.
// The daily aggregates (usage_daily) are kept: the console's totals stay.
// Idempotent; safe to run from every replica (an advisory lock lets one
// run at a time).
func (s *Store) MaintainUsagePartitions(ctx context.Context, now time.Time, retention time.Duration) (UsagePartitions, error) {
	var out UsagePartitions
	if s.dialect != migrations.Postgres {
		return out, nil
	}
	conn, err := s.sqlDB.Conn(ctx)
	if err != nil {
		return out, err
	}
	defer conn.Close()
	var locked bool
	if err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock(hashtext('usage_records_partitions'))`).Scan(&locked); err != nil || !locked {
		return out, err
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtext('usage_records_partitions'))`) //nolint:errcheck // released with the connection anyway

	today := now.UTC().Truncate(24 * time.Hour)
	for i := 0; i <= PartitionsAhead; i++ {
		from := today.AddDate(0, 0, i)
		name := "usage_records_" + from.Format("20060102")
		var exists bool
		if err := conn.QueryRowContext(ctx, isPartition, name).Scan(&exists); err != nil {
			return out, err
		}
		if exists {
			continue
		}
		if err := s.createDay(ctx, conn, from); err != nil {
			return out, fmt.Errorf("store: creating %s: %w", name, err)
		}
		if err := conn.QueryRowContext(ctx, isPartition, name).Scan(&exists); err != nil || !exists {
			continue // the legacy partition covers the day
		}
		s.usageDays.Store(from, true)
		out.Created = append(out.Created, name)
	}
	if retention <= 0 {
		return out, nil
	}
	cutoff := now.UTC().Add(-retention)
	rows, err := conn.QueryContext(ctx, `SELECT c.relname, pg_get_expr(c.relpartbound, c.oid)
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'usage_records'::regclass ORDER BY c.relname`)
	if err != nil {
		return out, err
	}
	var expired []string
	for rows.Next() {
		var name, bound string
		if err := rows.Scan(&name, &bound); err != nil {
			rows.Close()
			return out, err
		}
		if end, ok := partitionEnd(name, bound); ok && !end.After(cutoff) {
			expired = append(expired, name)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return out, err
	}
	for _, name := range expired {
		// Not in a transaction: DETACH … CONCURRENTLY waits for queries
		// on the partition instead of blocking new ones on the table.
		if _, err := conn.ExecContext(ctx, `ALTER TABLE usage_records DETACH PARTITION `+name+` CONCURRENTLY`); err != nil {
			return out, fmt.Errorf("store: detaching %s: %w", name, err)
		}
		if _, err := conn.ExecContext(ctx, `DROP TABLE `+name); err != nil {
			return out, fmt.Errorf("store: dropping %s: %w", name, err)
		}
		if end, ok := partitionEnd(name, ""); ok {
			s.usageDays.Delete(end.AddDate(0, 0, -1))
		}
		out.Dropped = append(out.Dropped, name)
	}
	return out, nil
}

// partitionEnd is the exclusive upper bound of a day or the legacy
// partition (false: the default partition, or a bound not understood).
var upperBound = regexp.MustCompile(`TO \('([^']+)'\)`)

func partitionEnd(name, bound string) (time.Time, bool) {
	if m := dayPartition.FindStringSubmatch(name); m != nil {
		d, err := time.Parse("20060102", m[1])
		return d.AddDate(0, 0, 1), err == nil
	}
	if name != "usage_records_legacy" {
		return time.Time{}, false
	}
	m := upperBound.FindStringSubmatch(bound)
	if m == nil {
		return time.Time{}, false
	}
	for _, layout := range []string{"2006-01-02 15:04:05-07", "2006-01-02 15:04:05.999999-07", "2006-01-02 15:04:05-07:00"} {
		if t, err := time.Parse(layout, m[1]); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}
