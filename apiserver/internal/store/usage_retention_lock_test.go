package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
)

// requestLoad runs what a request does with usage — the admission read,
// a usage batch write, the console's totals — in a loop on workers of
// their own workspace (so they never wait on each other's rows), worker w
// at the time at plus w days (plus a millisecond a request: each worker
// writes its own day's partition), through a store whose connections have
// lock_timeout = 1ms: a request that waits on a lock for longer fails with
// lock_not_available (55P03) instead of waiting, and is counted with the
// step it was in. The test runs one worker: two share the tables every
// request upserts (rate counters, usage windows, daily totals), and on a
// loaded CI machine two saw a lock wait with nothing else running (after
// the control below had ended) — one worker's extension of such a table,
// held past 1 ms while its process waited for a CPU, is the likely one.
// With one, nothing else in the test takes a lock a request could wait
// on, so a count above zero is a wait on the statement under test.
type requestLoad struct {
	done                 atomic.Int64 // requests ended
	lockWaits, otherErrs atomic.Int64
	firstErr             atomic.Value
	lastWait             atomic.Value // the message of the last lock wait
	mu                   sync.Mutex
	ends                 []time.Time // end of each request
	stop                 chan struct{}
	wg                   sync.WaitGroup
}

func startRequests(t *testing.T, url string, workers int, at time.Time) *requestLoad {
	t.Helper()
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	rs, err := store.Open(url+sep+"lock_timeout=1ms", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	ctx := context.Background()
	var lt string
	if err := rs.DB().QueryRowContext(ctx, `SHOW lock_timeout`).Scan(&lt); err != nil || lt != "1ms" {
		t.Fatalf("request connections: lock_timeout %q (%v), want 1ms", lt, err)
	}
	l := &requestLoad{stop: make(chan struct{})}
	win := []store.WindowSpec{{Name: "5h", Duration: 5 * time.Hour}}
	for w := range workers {
		ws, err := rs.CreateWorkspace(ctx, fmt.Sprintf("req%d", w), "free")
		if err != nil {
			t.Fatal(err)
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for n := 0; ; n++ {
				select {
				case <-l.stop:
					return
				default:
				}
				now := at.AddDate(0, 0, w).Add(time.Duration(n) * time.Millisecond)
				rec := store.UsageRecord{RequestID: fmt.Sprintf("%s-%d", ws.ID, n), WorkspaceID: ws.ID, Model: "m",
					PromptTokens: 10, CreditsMicro: 100, CreatedAt: now}
				err := func() error {
					if _, err := rs.Admit(ctx, now.Truncate(time.Minute).UnixMilli(),
						[]store.RateIncrement{{Bucket: "key:" + ws.ID, N: 1}}, ws.ID, true); err != nil {
						return fmt.Errorf("admit: %w", err)
					}
					if err := rs.RecordUsageBatch(ctx, []store.UsageRecord{rec}, [][]store.WindowSpec{win}, now); err != nil {
						return fmt.Errorf("usage write: %w", err)
					}
					if _, err := rs.SumUsage(ctx, ws.ID); err != nil {
						return fmt.Errorf("usage totals: %w", err)
					}
					if _, err := rs.UsageByDay(ctx, ws.ID, now.AddDate(0, 0, -30)); err != nil {
						return fmt.Errorf("usage by day: %w", err)
					}
					return nil
				}()
				var pgErr *pgconn.PgError
				switch {
				case errors.As(err, &pgErr) && pgErr.Code == "55P03":
					l.lockWaits.Add(1)
					l.lastWait.Store(err.Error())
				case err != nil:
					l.otherErrs.Add(1)
					l.firstErr.CompareAndSwap(nil, err.Error())
				}
				l.mu.Lock()
				l.ends = append(l.ends, time.Now())
				l.mu.Unlock()
				l.done.Add(1)
			}
		}()
	}
	t.Cleanup(l.halt)
	return l
}

// waitFor waits (up to a minute) until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling a counter the workers advance
	}
}

func (l *requestLoad) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// endedBetween counts the requests that ended within [from, to].
func (l *requestLoad) endedBetween(from, to time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.ends {
		if !e.Before(from) && !e.After(to) {
			n++
		}
	}
	return n
}

// The partition maintenance (CREATE of the days ahead, and retention's
// DETACH PARTITION … CONCURRENTLY, then DROP TABLE of the detached day)
// takes no lock a request waits on: while requests run admission, usage
// writes and usage reads in a loop with lock_timeout = 1ms, retention
// drops thirty expired day partitions holding rows (and the legacy one),
// then the days of a later present are created, and no request hits its
// lock timeout. The method is checked first: a plain DETACH PARTITION
// (ACCESS EXCLUSIVE on usage_records) held open in a transaction is seen
// by the same requests as lock timeouts.
//
// It failed while usage_records had a foreign key to workspaces (before
// migration 00024): the DROP TABLE of a detached day took ACCESS
// EXCLUSIVE on workspaces (to remove the foreign key's action triggers),
// and a usage write's foreign-key check waited on it (docs/gateway.md,
// Usage at scale).
func TestRetentionDropBlocksNoRequest(t *testing.T) {
	t.Parallel()
	url := storetest.PostgresURL(t)
	s, err := store.Open(url, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	// The test's present is 100 days ahead, so that its days and the
	// expired ones are made here, after the legacy partition's range.
	present := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, 100)
	const expired = 30
	old, err := s.CreateWorkspace(ctx, "old", "free")
	if err != nil {
		t.Fatal(err)
	}
	// The expired days (with rows), the days of the present and ahead,
	// all made before the requests start (so no request creates a
	// partition, and the retention run below only drops).
	first := present.AddDate(0, 0, -expired-10)
	for d := first; d.Before(present); d = d.AddDate(0, 0, store.PartitionsAhead) {
		if _, err := s.MaintainUsagePartitions(ctx, d, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.MaintainUsagePartitions(ctx, present, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO usage_records (request_id, workspace_id, model, created_at)
SELECT 'old-' || g, $1, 'm', $2::timestamptz + (g % ($3 * 24)) * interval '1 hour'
FROM generate_series(1, 20000) g`, old.ID, first, expired); err != nil {
		t.Fatal(err)
	}

	load := startRequests(t, url, 1, present.Add(time.Hour))
	waitFor(t, "the first requests", func() bool { return load.done.Load() >= 20 })
	if n, e := load.lockWaits.Load(), load.otherErrs.Load(); n != 0 || e != 0 {
		t.Fatalf("before anything ran: %d lock waits, %d errors (%v)", n, e, load.firstErr.Load())
	}

	// The control: a lock requests do wait on is seen.
	control := "usage_records_" + present.AddDate(0, 0, 3).Format("20060102")
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `ALTER TABLE usage_records DETACH PARTITION `+control); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a request to wait on a plain DETACH", func() bool { return load.lockWaits.Load() > 0 })
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	t.Logf("control: a plain DETACH held open made %d requests wait", load.lockWaits.Load())
	// A request that waited before the rollback may count its timeout
	// after it: let those end before counting from zero.
	done := load.done.Load()
	waitFor(t, "requests after the control", func() bool { return load.done.Load() >= done+20 })
	load.lockWaits.Store(0)
	done = load.done.Load()
	waits := sampleWaits(ctx, s.DB())
	waitFor(t, "more requests after the control", func() bool { return load.done.Load() >= done+20 })
	if n, seen := load.lockWaits.Load(), waits(); n != 0 {
		t.Fatalf("%d lock waits after the control ended (%v); waits seen:\n%s", n, load.lastWait.Load(), strings.Join(seen, "\n"))
	}

	// Retention of 10 days at the present drops the thirty expired days
	// (and the legacy partition, older still).
	// What the requests wait on, sampled while the drop runs (for the
	// failure message only: the count above is the assertion).
	waits = sampleWaits(ctx, s.DB())
	began := time.Now()
	res, err := s.MaintainUsagePartitions(ctx, present, 10*24*time.Hour)
	blockedBy := waits()
	ended := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	during := load.endedBetween(began, ended)
	done = load.done.Load()
	waitFor(t, "requests after the drop", func() bool { return load.done.Load() >= done+20 })

	if len(res.Dropped) < expired {
		t.Fatalf("retention dropped %v, want at least the %d expired days", res.Dropped, expired)
	}
	if during == 0 {
		t.Fatalf("no request ended during the %v the drop took: the test did not overlap them", ended.Sub(began))
	}
	if n, e := load.lockWaits.Load(), load.otherErrs.Load(); n != 0 || e != 0 {
		t.Fatalf("during the retention drop (%v, %d partitions): %d requests waited on a lock (%v), %d failed otherwise (%v); "+
			"waits seen:\n%s", ended.Sub(began), len(res.Dropped), n, load.lastWait.Load(), e, load.firstErr.Load(), strings.Join(blockedBy, "\n"))
	}
	var left int
	if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM usage_records WHERE workspace_id = $1`, old.ID).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d expired records left (%v)", left, err)
	}
	t.Logf("retention dropped %d partitions in %v; %d requests ended meanwhile, none waited on a lock",
		len(res.Dropped), ended.Sub(began), during)

	// Creating partitions: the days of a present 30 days later (none of
	// them exists yet), while the same requests run.
	waits = sampleWaits(ctx, s.DB())
	began = time.Now()
	res, err = s.MaintainUsagePartitions(ctx, present.AddDate(0, 0, 30), 0)
	blockedBy = waits()
	ended = time.Now()
	if err != nil {
		t.Fatal(err)
	}
	duringCreate := load.endedBetween(began, ended)
	done = load.done.Load()
	waitFor(t, "requests after the creation", func() bool { return load.done.Load() >= done+20 })
	load.halt()
	if len(res.Created) != store.PartitionsAhead+1 {
		t.Fatalf("created %v, want the %d days of the later present", res.Created, store.PartitionsAhead+1)
	}
	if duringCreate == 0 {
		t.Fatalf("no request ended during the %v the creation took: the test did not overlap them", ended.Sub(began))
	}
	if n, e := load.lockWaits.Load(), load.otherErrs.Load(); n != 0 || e != 0 {
		t.Fatalf("during the creation of %d partitions (%v): %d requests waited on a lock (%v), %d failed otherwise (%v); "+
			"waits seen:\n%s", len(res.Created), ended.Sub(began), n, load.lastWait.Load(), e, load.firstErr.Load(), strings.Join(blockedBy, "\n"))
	}
	t.Logf("created %d partitions in %v; %d requests ended meanwhile, none waited on a lock",
		len(res.Created), ended.Sub(began), duringCreate)
}

// sampleWaits records, until the returned func is called, the distinct
// lock waits of other backends with the statement that blocks each; the
// func returns them.
func sampleWaits(ctx context.Context, db *sql.DB) func() []string {
	stop, done := make(chan struct{}), make(chan []string)
	go func() {
		seen := map[string]bool{}
		var out []string
		for {
			select {
			case <-stop:
				done <- out
				return
			default:
			}
			rows, err := db.QueryContext(ctx, `SELECT l.locktype || ' ' || l.mode || ' ' || coalesce(l.relation::regclass::text, '')
  || ' :: ' || left(a.query, 80) || ' <- ' || coalesce((SELECT string_agg(left(b.query, 80), ' | ')
  FROM pg_stat_activity b WHERE b.pid = ANY(pg_blocking_pids(l.pid))), '')
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE NOT l.granted AND a.datname = current_database()`)
			if err != nil {
				continue
			}
			for rows.Next() {
				var w string
				if rows.Scan(&w) == nil && !seen[w] {
					seen[w] = true
					out = append(out, w)
				}
			}
			rows.Close()
		}
	}()
	return func() []string { close(stop); return <-done }
}
