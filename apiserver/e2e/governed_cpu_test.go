package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
)

// CPU accounting of the governed board (governed_bench_test.go): the CPU
// time per request of the serving process, of the PostgreSQL server and of
// the benchmark process (load generator and mock upstream), read from
// /proc and getrusage around runs of one level on each lane. Unlike a p99
// it does not move with the machine's other work, and on two cores it is
// what the throughput frontier is made of.

// clockTick is the unit of /proc/<pid>/stat's times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// procStat is what the board reads of one /proc/<pid>/stat.
type procStat struct {
	comm     string
	ppid     int
	cpu      time.Duration // utime + stime
	children time.Duration // cutime + cstime: its children that ended and were waited for
}

// parseProcStat reads /proc/<pid>/stat's text: the command name in
// parentheses (it may hold spaces and parentheses itself), then the state,
// the parent's pid and, as fields 14 to 17, utime, stime, cutime, cstime.
func parseProcStat(raw []byte) (procStat, error) {
	open, end := bytes.IndexByte(raw, '('), bytes.LastIndexByte(raw, ')')
	if open < 0 || end < open {
		return procStat{}, fmt.Errorf("proc stat %q: no command name", raw)
	}
	f := strings.Fields(string(raw[end+1:]))
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("proc stat %q: %d fields after the command name", raw, len(f))
	}
	var n [5]int64
	for i, at := range []int{1, 11, 12, 13, 14} { // ppid, utime, stime, cutime, cstime
		v, err := strconv.ParseInt(f[at], 10, 64)
		if err != nil {
			return procStat{}, fmt.Errorf("proc stat %q: field %d: %w", raw, at+3, err)
		}
		n[i] = v
	}
	return procStat{comm: string(raw[open+1 : end]), ppid: int(n[0]),
		cpu: time.Duration(n[1]+n[2]) * clockTick, children: time.Duration(n[3]+n[4]) * clockTick}, nil
}

func readProcStat(pid int) (procStat, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(raw)
}

// selfCPU is the benchmark process's user+system CPU time so far (all its
// threads; the processes it started are apart).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pgServer finds the PostgreSQL server's processes: the postmaster is the
// parent of the backend of a connection of the board's own, held open
// through the run (so that it neither ends nor starts within a
// measurement) and left out of every sum (so that the board's own queries
// are not counted).
type pgServer struct {
	db         *sql.DB
	postmaster int
	self       int // the board's own backend
}

// findPGServer connects to dbURL and finds its postmaster; an error when
// the server's processes cannot be read here (another machine or pid
// namespace).
func findPGServer(ctx context.Context, dbURL string) (*pgServer, error) {
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	var backend int
	if err := db.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		db.Close()
		return nil, err
	}
	st, err := readProcStat(backend)
	if err == nil && !isPostgres(st.comm) {
		err = fmt.Errorf("pid %d is %q, not a PostgreSQL backend", backend, st.comm)
	}
	var pm procStat
	if err == nil {
		pm, err = readProcStat(st.ppid)
	}
	if err == nil && !isPostgres(pm.comm) {
		err = fmt.Errorf("the parent %d of backend %d is %q, not the postmaster", st.ppid, backend, pm.comm)
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("the PostgreSQL server's processes: %w", err)
	}
	return &pgServer{db: db, postmaster: st.ppid, self: backend}, nil
}

func isPostgres(comm string) bool { return comm == "postgres" || comm == "postmaster" }

func (g *pgServer) Close() error { return g.db.Close() }

// serverCPU is the CPU time of the whole server so far: the postmaster's
// own and that of its children that ended (a backend's when its
// connection closed), plus each live child's (backends, the WAL writer,
// the checkpointer …).
func (g *pgServer) serverCPU() (time.Duration, error) {
	pm, err := readProcStat(g.postmaster)
	if err != nil {
		return 0, err
	}
	total := pm.cpu + pm.children
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readProcStat(pid)
		if err != nil { // ended meanwhile
			continue
		}
		if st.ppid == g.postmaster && pid != g.self {
			total += st.cpu
		}
	}
	return total, nil
}

// databaseBackends are the client backends connected to the benchmark's
// database (pg_stat_activity), the board's own connection apart, each with
// its CPU time so far: what the serving process asks of PostgreSQL,
// without another database's work on a shared server nor an autovacuum
// worker's (which comes when it comes, whichever lane runs).
func (g *pgServer) databaseBackends(ctx context.Context) (map[int]time.Duration, error) {
	rows, err := g.db.QueryContext(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var pids []int
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			return nil, err
		}
		pids = append(pids, pid)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	cpu := map[int]time.Duration{}
	for _, pid := range pids {
		if st, err := readProcStat(pid); err == nil {
			cpu[pid] = st.cpu
		}
	}
	return cpu, nil
}

// backendsDelta is the CPU time the backends at the end of a window used
// within it: a backend that started within the window counts whole; one
// that ended within it is not seen (the gateway's pool keeps its
// connections).
func backendsDelta(before, after map[int]time.Duration) time.Duration {
	var d time.Duration
	for pid, t := range after {
		d += t - before[pid]
	}
	return d
}

// cpuCounters is one reading of every counter the board accounts.
type cpuCounters struct {
	serving  time.Duration
	server   time.Duration         // the PostgreSQL server (0 without pg)
	backends map[int]time.Duration // the benchmark database's backends
	bench    time.Duration         // the benchmark process
}

// readCPU reads every counter; the end of a window (end) reads the
// benchmark process's own first and the start reads it last, so that the
// reading's own work (a scan of /proc) is outside the window.
func readCPU(ctx context.Context, servingPID int, pg *pgServer, end bool) (cpuCounters, error) {
	var c cpuCounters
	if end {
		c.bench = selfCPU()
	}
	st, err := readProcStat(servingPID)
	if err != nil {
		return c, err
	}
	c.serving = st.cpu
	if pg != nil {
		if c.backends, err = pg.databaseBackends(ctx); err != nil {
			return c, err
		}
		if c.server, err = pg.serverCPU(); err != nil {
			return c, err
		}
	}
	if !end {
		c.bench = selfCPU()
	}
	return c, nil
}

// cpuUsage is what a lane used over its windows.
type cpuUsage struct {
	requests                   int
	wall                       time.Duration
	serving, server, db, bench time.Duration
}

func (u *cpuUsage) add(before, after cpuCounters, requests int, wall time.Duration) {
	u.requests += requests
	u.wall += wall
	u.serving += after.serving - before.serving
	u.server += after.server - before.server
	u.db += backendsDelta(before.backends, after.backends)
	u.bench += after.bench - before.bench
}

// laneCPU is a lane's CPU per request in the JSON. Total is the serving
// process, the PostgreSQL server and the benchmark process.
type laneCPU struct {
	Clients  int     `json:"clients"`
	Seconds  float64 `json:"seconds"` // the lane's windows, their tails included
	Requests int     `json:"requests"`
	// ServingUsPerReq: the gateway's or the bare proxy's process.
	ServingUsPerReq float64 `json:"servingUsPerReq"`
	// PostgresUsPerReq: every process of the PostgreSQL server (the
	// postmaster and its children, those that ended included); on a shared
	// server, other databases' work too.
	PostgresUsPerReq float64 `json:"postgresUsPerReq"`
	// PostgresDatabaseUsPerReq: the client backends connected to the
	// benchmark's database only (no WAL writer, no autovacuum, no other
	// database).
	PostgresDatabaseUsPerReq float64 `json:"postgresDatabaseUsPerReq"`
	// BenchUsPerReq: the benchmark process: load generator and mock upstream.
	BenchUsPerReq float64 `json:"benchUsPerReq"`
	TotalUsPerReq float64 `json:"totalUsPerReq"`
	// Postgres says which processes were read, or why none were.
	Postgres string `json:"postgres"`
}

func (u cpuUsage) lane(clients int, postgres string) laneCPU {
	per := func(d time.Duration) float64 {
		if u.requests == 0 {
			return 0
		}
		return us(d) / float64(u.requests)
	}
	return laneCPU{Clients: clients, Seconds: u.wall.Seconds(), Requests: u.requests,
		ServingUsPerReq: per(u.serving), PostgresUsPerReq: per(u.server), PostgresDatabaseUsPerReq: per(u.db),
		BenchUsPerReq: per(u.bench), TotalUsPerReq: per(u.serving + u.server + u.bench), Postgres: postgres}
}

// maxTail bounds a window's tail (pgServer.settle).
const maxTail = 10 * time.Second

// settle waits until the benchmark database's client backends have used
// no CPU for quiet (at least quiet, at most limit; quiet alone without a
// server to read): the serving process's deferred writes are done (on a
// loaded machine a backlog of usage batches can outlast a fixed tail).
// It reads the backends' /proc/<pid>/stat every 20 ms, which costs the
// benchmark process little and PostgreSQL nothing.
func (g *pgServer) settle(ctx context.Context, quiet, limit time.Duration) {
	if g == nil {
		time.Sleep(quiet)
		return
	}
	backends, err := g.databaseBackends(ctx)
	if err != nil {
		time.Sleep(quiet)
		return
	}
	sum := func() time.Duration {
		var t time.Duration
		for pid := range backends {
			if st, err := readProcStat(pid); err == nil {
				t += st.cpu
			}
		}
		return t
	}
	start := time.Now()
	last, since := sum(), time.Now()
	for time.Since(since) < quiet && time.Since(start) < limit {
		time.Sleep(20 * time.Millisecond)
		if t := sum(); t != last {
			last, since = t, time.Now()
		}
	}
}

// idleCPU is the CPU the parts counted use per second with no request at
// all, in µs per second: background work (the gateway's timers and
// polls, another database's work on a shared PostgreSQL server) that a
// window counts whichever lane it measures.
type idleCPU struct {
	Seconds                  float64 `json:"seconds"`
	BareProxyUsPerSec        float64 `json:"bareProxyUsPerSec"`
	GatewayUsPerSec          float64 `json:"gatewayUsPerSec"`
	PostgresUsPerSec         float64 `json:"postgresUsPerSec"`
	PostgresDatabaseUsPerSec float64 `json:"postgresDatabaseUsPerSec"`
	BenchUsPerSec            float64 `json:"benchUsPerSec"`
}

// measureCPU runs clients on each lane (bare proxy, gateway) for d per
// window, repeats times in the lanes' alternating order, and reads every
// counter before a window and after its tail: until the database's client
// backends have been quiet for tail (pgServer.settle), so that work the
// serving process defers (the gateway's usage batches within 20 ms, its
// leased settlements within 100 ms, a backlog) counts for the lane that
// caused it; both lanes get the same rule, and each window starts after
// the same quiet (so that it does not start with the other lane's
// leftovers). First, one window of d and a tail without requests gives the
// idle rates.
func measureCPU(b *testing.B, lanes [2]benchPath, dbURL string, clients, repeats int, d, tail time.Duration) ([2]laneCPU, idleCPU) {
	ctx := context.Background()
	note := ""
	pg, err := findPGServer(ctx, dbURL)
	if err != nil {
		note = fmt.Sprintf("not measured: %v", err)
		fmt.Printf("governed board: PostgreSQL CPU %s\n", note)
	} else {
		defer pg.Close()
		note = fmt.Sprintf("postmaster %d and its children; the database's client backends from pg_stat_activity", pg.postmaster)
	}
	read := func(p benchPath, end bool) cpuCounters {
		c, err := readCPU(ctx, p.pid, pg, end)
		if err != nil {
			b.Fatalf("%s: CPU: %v", p.name, err)
		}
		return c
	}
	// Idle: both serving processes read, PostgreSQL and the benchmark
	// process once (through the gateway lane's reading), after what came
	// before (the sweep's backlog) has settled.
	pg.settle(ctx, tail, maxTail)
	bare0, gw0 := read(lanes[0], false), read(lanes[1], false)
	t0 := time.Now()
	time.Sleep(d + tail)
	gw1, bare1 := read(lanes[1], true), read(lanes[0], true)
	idleSecs := time.Since(t0).Seconds()
	rate := func(x time.Duration) float64 { return us(x) / idleSecs }
	idle := idleCPU{Seconds: idleSecs, BareProxyUsPerSec: rate(bare1.serving - bare0.serving),
		GatewayUsPerSec: rate(gw1.serving - gw0.serving), PostgresUsPerSec: rate(gw1.server - gw0.server),
		PostgresDatabaseUsPerSec: rate(backendsDelta(gw0.backends, gw1.backends)), BenchUsPerSec: rate(gw1.bench - gw0.bench)}
	var use [2]cpuUsage
	for rep := range repeats {
		for _, j := range laneOrder(0, rep) {
			p := lanes[j]
			pg.settle(ctx, tail, maxTail) // the previous window's leftovers out of this one
			before := read(p, false)
			t0 := time.Now()
			run := p.loadRun(b, clients, d)
			pg.settle(ctx, tail, maxTail) // a measurement's tail, the same rule for both lanes
			wall := time.Since(t0)
			after := read(p, true)
			use[j].add(before, after, len(run.lat)+run.warm, wall)
		}
	}
	return [2]laneCPU{use[0].lane(clients, note), use[1].lane(clients, note)}, idle
}
