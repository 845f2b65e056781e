package storetest

// PostgreSQL's own counters for the scale benchmarks (docs/scale.md): the
// statements and rows a piece of work costs, read from pg_stat_database and
// pg_stat_user_tables of the benchmark's database around it. A backend
// publishes its counters when it goes idle, at most once a second (else
// within PostgreSQL's ten-second idle flush), and when it ends. Work on a
// store of the test's own runs on one connection while measured
// (SetMaxConns(1)) and each reading first forces that connection's flush
// (PostgreSQL 15+); work of another process is read once its connections
// have published everything (PGMeter.Settle).

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/wait"
)

// PGCounters are one reading of the database's cumulative counters.
type PGCounters struct {
	Xacts, Returned, Fetched, Inserted, Updated, Deleted int64
	SeqScans, SeqRows, IdxScans                          int64
	// Backends is the database's connections at the reading (not a delta).
	Backends int64
	// IdxRows: rows the service's own tables gave index scans
	// (pg_stat_user_tables.idx_tup_fetch). Unlike Fetched it leaves out the
	// system catalogs, which a backend newly opened during the work reads
	// to fill its caches.
	IdxRows int64
}

// Minus is c's counters less o's; Backends stays c's.
func (c PGCounters) Minus(o PGCounters) PGCounters {
	return PGCounters{c.Xacts - o.Xacts, c.Returned - o.Returned, c.Fetched - o.Fetched, c.Inserted - o.Inserted,
		c.Updated - o.Updated, c.Deleted - o.Deleted, c.SeqScans - o.SeqScans, c.SeqRows - o.SeqRows,
		c.IdxScans - o.IdxScans, c.Backends, c.IdxRows - o.IdxRows}
}

// ReadPG flushes the (single) connection's pending counters, then reads
// them. Its own statements count in the next reading: PGMeter subtracts
// that cost.
func ReadPG(ctx context.Context, db *sql.DB) (PGCounters, error) {
	var c PGCounters
	if _, err := db.ExecContext(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
		return c, err
	}
	err := db.QueryRowContext(ctx, `SELECT xact_commit + xact_rollback, tup_returned, tup_fetched, tup_inserted,
	tup_updated, tup_deleted, numbackends,
	(SELECT coalesce(sum(seq_scan), 0) FROM pg_stat_user_tables),
	(SELECT coalesce(sum(seq_tup_read), 0) FROM pg_stat_user_tables),
	(SELECT coalesce(sum(idx_scan), 0) FROM pg_stat_user_tables),
	(SELECT coalesce(sum(idx_tup_fetch), 0) FROM pg_stat_user_tables)
FROM pg_stat_database WHERE datname = current_database()`).Scan(&c.Xacts, &c.Returned, &c.Fetched, &c.Inserted,
		&c.Updated, &c.Deleted, &c.Backends, &c.SeqScans, &c.SeqRows, &c.IdxScans, &c.IdxRows)
	return c, err
}

// PGMeter measures work on a database through a connection of its own.
type PGMeter struct {
	db       *sql.DB
	overhead PGCounters // what two readings in a row count
	reads    int64      // readings taken through read
}

// PGReading is a reading of the counters and how many the meter took up to it.
type PGReading struct {
	PGCounters
	reads int64
	at    time.Time
	// idleXacts and idleSeqScans are the other clients' statements per
	// second that read no row, over Settle's quiet window.
	idleXacts, idleSeqScans float64
}

func (m *PGMeter) read(ctx context.Context) (PGCounters, error) {
	m.reads++
	return ReadPG(ctx, m.db)
}

// Between is the work between two readings of Settle, less the meter's own
// readings in between and the idle rate of statements over the time between
// them.
func (m *PGMeter) Between(before, after PGReading) PGCounters {
	d := after.Minus(before.PGCounters)
	k := after.reads - before.reads
	o := m.overhead
	d = d.Minus(PGCounters{k * o.Xacts, k * o.Returned, k * o.Fetched, k * o.Inserted, k * o.Updated, k * o.Deleted,
		k * o.SeqScans, k * o.SeqRows, k * o.IdxScans, 0, k * o.IdxRows})
	// The lower of the two quiet windows' rates: a one-off in either (an
	// autovacuum worker's transactions) is no idle rate.
	secs := after.at.Sub(before.at).Seconds()
	d.Xacts -= int64(math.Round(min(before.idleXacts, after.idleXacts) * secs))
	d.SeqScans -= int64(math.Round(min(before.idleSeqScans, after.idleSeqScans) * secs))
	d.Backends = after.Backends
	return d
}

// NewPGMeter waits until db's connection is the only client of the
// database (the pool's other connections closed, their counters
// published as their backends ended), then measures what a reading costs.
func NewPGMeter(ctx context.Context, tb testing.TB, db *sql.DB) *PGMeter {
	tb.Helper()
	deadline, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		others, err := otherClients(ctx, db)
		if err != nil {
			tb.Fatal(err)
		}
		if others == 0 {
			break
		}
		if err := wait.For(deadline, 20*time.Millisecond); err != nil {
			tb.Fatalf("%d other connections to the benchmark's database stay open", others)
		}
	}
	return newMeter(ctx, tb, db)
}

// NewPGMeterBeside measures the counters of a database other processes use
// too, through db (which it pins to one connection): their work is read
// with Settle.
func NewPGMeterBeside(ctx context.Context, tb testing.TB, db *sql.DB) *PGMeter {
	tb.Helper()
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	return newMeter(ctx, tb, db)
}

func otherClients(ctx context.Context, db *sql.DB) (int64, error) {
	var others int64
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()`).Scan(&others)
	return others, err
}

func newMeter(ctx context.Context, tb testing.TB, db *sql.DB) *PGMeter {
	tb.Helper()
	// The first readings of a connection also fill its catalog caches: the
	// cost of a reading is taken once they are warm.
	var r [4]PGCounters
	for i := range r {
		var err error
		if r[i], err = ReadPG(ctx, db); err != nil {
			tb.Fatal(errors.Join(errors.New("pg_stat_force_next_flush needs PostgreSQL 15+ and a superuser (or a grant of EXECUTE on it)"), err))
		}
	}
	m := &PGMeter{db: db, overhead: r[3].Minus(r[2])}
	if again := r[2].Minus(r[1]); again != m.overhead {
		tb.Logf("a reading of the PostgreSQL counters costs %+v, then %+v", again, m.overhead)
	}
	return m
}

// Measure runs work and returns the counters it moved.
func (m *PGMeter) Measure(ctx context.Context, tb testing.TB, work func()) PGCounters {
	tb.Helper()
	before, err := ReadPG(ctx, m.db)
	if err != nil {
		tb.Fatal(err)
	}
	work()
	after, err := ReadPG(ctx, m.db)
	if err != nil {
		tb.Fatal(err)
	}
	d := after.Minus(before).Minus(m.overhead)
	d.Backends = after.Backends
	return d
}

// Settle reads the counters once every other connection has published its
// work: no row counter (less the meter's own readings) moves for quiet, a
// little longer than PostgreSQL's ten-second idle flush. Statements that
// read no row still may: an idle server's polls of empty queues. Their rate
// over the quiet window is the reading's idle rate, which Between takes off.
// It fails tb when rows keep moving for a minute.
func (m *PGMeter) Settle(ctx context.Context, tb testing.TB, quiet time.Duration) PGReading {
	tb.Helper()
	deadline, cancel := context.WithTimeout(ctx, time.Minute+quiet)
	defer cancel()
	last, err := m.read(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	var idle PGCounters // the statements without rows since the rows last moved
	since := time.Now()
	for {
		if err := wait.For(deadline, 250*time.Millisecond); err != nil {
			tb.Fatalf("PostgreSQL's row counters kept moving for a minute: other clients of the database are busy (last reading %+v)", last)
		}
		c, err := m.read(ctx)
		if err != nil {
			tb.Fatal(err)
		}
		moved := c.Minus(last).Minus(m.overhead)
		last = c
		if moved.Returned != 0 || moved.Fetched != 0 || moved.Inserted != 0 || moved.Updated != 0 ||
			moved.Deleted != 0 || moved.SeqRows != 0 || moved.IdxScans != 0 {
			idle, since = PGCounters{}, time.Now()
			continue
		}
		idle.Xacts += moved.Xacts
		idle.SeqScans += moved.SeqScans
		if took := time.Since(since); took >= quiet {
			return PGReading{PGCounters: c, reads: m.reads, at: time.Now(),
				idleXacts: float64(idle.Xacts) / took.Seconds(), idleSeqScans: float64(idle.SeqScans) / took.Seconds()}
		}
	}
}

// Report divides c by n and reports each counter with suffix ("/req",
// "/reap-pass").
func (c PGCounters) Report(b *testing.B, n int, suffix string) {
	per := func(v int64) float64 { return float64(v) / float64(n) }
	// The store runs each statement as its own transaction (no default
	// transaction) unless it opens one: transactions are at most statements.
	b.ReportMetric(per(c.Xacts), "pg-xacts"+suffix)
	b.ReportMetric(per(c.Returned), "pg-tup-returned"+suffix)
	b.ReportMetric(per(c.Fetched), "pg-tup-fetched"+suffix)
	b.ReportMetric(per(c.Inserted), "pg-tup-inserted"+suffix)
	b.ReportMetric(per(c.Updated), "pg-tup-updated"+suffix)
	b.ReportMetric(per(c.Deleted), "pg-tup-deleted"+suffix)
	b.ReportMetric(per(c.SeqScans), "pg-seq-scans"+suffix)
	b.ReportMetric(per(c.SeqRows), "pg-seq-rows"+suffix)
	b.ReportMetric(per(c.IdxScans), "pg-idx-scans"+suffix)
	b.ReportMetric(per(c.IdxRows), "pg-idx-rows"+suffix)
}
