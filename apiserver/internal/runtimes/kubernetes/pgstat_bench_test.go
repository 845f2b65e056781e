package kubernetes

// PostgreSQL's own counters for the scale benchmark (docs/scale.md): the
// statements and rows a piece of work costs, read from pg_stat_database and
// pg_stat_user_tables of the benchmark's database around it. A backend
// publishes its counters when it goes idle, at most once a second, so the
// store runs on one connection while measured (pinTo1) and each reading
// first forces that connection's flush (PostgreSQL 15+).

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/wait"
)

// pgCounters are one reading of the database's cumulative counters.
type pgCounters struct {
	xacts, returned, fetched, inserted, updated, deleted int64
	seqScans, seqRows, idxScans                          int64
	backends                                             int64
}

func (c pgCounters) minus(o pgCounters) pgCounters {
	return pgCounters{c.xacts - o.xacts, c.returned - o.returned, c.fetched - o.fetched, c.inserted - o.inserted,
		c.updated - o.updated, c.deleted - o.deleted, c.seqScans - o.seqScans, c.seqRows - o.seqRows,
		c.idxScans - o.idxScans, c.backends}
}

// readPG flushes the (single) connection's pending counters, then reads
// them. Its own statements count in the next reading: pgMeter subtracts
// that cost.
func readPG(ctx context.Context, db *sql.DB) (pgCounters, error) {
	var c pgCounters
	if _, err := db.ExecContext(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
		return c, err
	}
	err := db.QueryRowContext(ctx, `SELECT xact_commit + xact_rollback, tup_returned, tup_fetched, tup_inserted,
	tup_updated, tup_deleted, numbackends,
	(SELECT coalesce(sum(seq_scan), 0) FROM pg_stat_user_tables),
	(SELECT coalesce(sum(seq_tup_read), 0) FROM pg_stat_user_tables),
	(SELECT coalesce(sum(idx_scan), 0) FROM pg_stat_user_tables)
FROM pg_stat_database WHERE datname = current_database()`).Scan(&c.xacts, &c.returned, &c.fetched, &c.inserted,
		&c.updated, &c.deleted, &c.backends, &c.seqScans, &c.seqRows, &c.idxScans)
	return c, err
}

// pgMeter measures work on a store pinned to one connection.
type pgMeter struct {
	db       *sql.DB
	overhead pgCounters // what two readings in a row count
}

// newPGMeter waits until db's connection is the only client of the
// database (the pool's other connections closed, their counters
// published as their backends ended), then measures what a reading costs.
func newPGMeter(ctx context.Context, b *testing.B, db *sql.DB) *pgMeter {
	deadline, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		var others int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()`).Scan(&others); err != nil {
			b.Fatal(err)
		}
		if others == 0 {
			break
		}
		if err := wait.For(deadline, 20*time.Millisecond); err != nil {
			b.Fatalf("%d other connections to the benchmark's database stay open", others)
		}
	}
	// The first readings of a connection also fill its catalog caches: the
	// cost of a reading is taken once they are warm.
	var r [4]pgCounters
	for i := range r {
		var err error
		if r[i], err = readPG(ctx, db); err != nil {
			b.Fatal(errors.Join(errors.New("pg_stat_force_next_flush needs PostgreSQL 15+ and a superuser (or a grant of EXECUTE on it)"), err))
		}
	}
	m := &pgMeter{db: db, overhead: r[3].minus(r[2])}
	if again := r[2].minus(r[1]); again != m.overhead {
		b.Logf("a reading of the PostgreSQL counters costs %+v, then %+v", again, m.overhead)
	}
	return m
}

// measure runs work and returns the counters it moved.
func (m *pgMeter) measure(ctx context.Context, b *testing.B, work func()) pgCounters {
	before, err := readPG(ctx, m.db)
	if err != nil {
		b.Fatal(err)
	}
	work()
	after, err := readPG(ctx, m.db)
	if err != nil {
		b.Fatal(err)
	}
	d := after.minus(before).minus(m.overhead)
	d.backends = after.backends
	return d
}

// report divides c by n and reports each counter with suffix ("/req",
// "/reap-pass").
func (c pgCounters) report(b *testing.B, n int, suffix string) {
	per := func(v int64) float64 { return float64(v) / float64(n) }
	// The store runs each statement as its own transaction (no default
	// transaction): transactions are statements.
	b.ReportMetric(per(c.xacts), "pg-xacts"+suffix)
	b.ReportMetric(per(c.returned), "pg-tup-returned"+suffix)
	b.ReportMetric(per(c.fetched), "pg-tup-fetched"+suffix)
	b.ReportMetric(per(c.inserted), "pg-tup-inserted"+suffix)
	b.ReportMetric(per(c.updated), "pg-tup-updated"+suffix)
	b.ReportMetric(per(c.deleted), "pg-tup-deleted"+suffix)
	b.ReportMetric(per(c.seqScans), "pg-seq-scans"+suffix)
	b.ReportMetric(per(c.seqRows), "pg-seq-rows"+suffix)
	b.ReportMetric(per(c.idxScans), "pg-idx-scans"+suffix)
}
