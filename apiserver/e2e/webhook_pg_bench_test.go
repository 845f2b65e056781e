package e2e

// PostgreSQL work of one whole webhook request (docs/scale.md, "PostgreSQL
// work per webhook request"): a real apiserver on PostgreSQL with the local
// runtime driver and a running test agent behind the target project, and
// other projects registered beside it. The counters are the database's own
// (pg_stat_database, pg_stat_user_tables: storetest.PGMeter), read once the
// apiserver's connections have published everything, so they hold every
// statement the request causes on the API's side: API key and channel-secret
// auth, loading the project, the channel checks, the route to the pod, and
// any record the API writes after the reply. The test agent answers at once
// and calls nothing back: the agent's own model calls and callback records
// are its turn's, not counted here.

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
)

// pgQuiet is how long the counters must stay still before a reading counts:
// longer than PostgreSQL's ten-second flush of an idle backend's counters.
const pgQuiet = 11 * time.Second

// webhookPG is what a run of webhook requests cost PostgreSQL.
type webhookPG struct {
	perRun   storetest.PGCounters
	requests int
	// peakConns is the most connections the apiserver held to the database
	// during the requests (pg_stat_database.numbackends less the meter's).
	peakConns int64
}

// measureWebhookPG registers projects projects (the target included), starts
// the target's pod, and counts PostgreSQL's work for requests inline-reply
// webhook messages to it.
func measureWebhookPG(tb testing.TB, projects, requests int) webhookPG {
	tb.Helper()
	ctx := context.Background()
	e := newEnv(tb)
	acc := e.account("bench")
	db, err := sql.Open("pgx", e.dbURL)
	must(tb, err)
	tb.Cleanup(func() { _ = db.Close() })
	// The registered projects beside the target, each with its webhook
	// channel, inserted in two statements: rows like the ones project create
	// and channel set write, in the target's workspace (the worst case for
	// any per-workspace read).
	_, err = db.ExecContext(ctx, `INSERT INTO projects (id, workspace_id, name)
SELECT 'prj_fill' || lpad(i::text, 6, '0'), $1, 'fill-' || i FROM generate_series(1, $2) AS i`, acc.workspace, projects-1)
	must(tb, err)
	_, err = db.ExecContext(ctx, `INSERT INTO channels (id, project_id, secret)
SELECT 'chn_fill' || lpad(i::text, 6, '0'), 'prj_fill' || lpad(i::text, 6, '0'), 'fill-secret' FROM generate_series(1, $1) AS i`, projects-1)
	must(tb, err)
	// Vacuumed and analyzed now, so no autovacuum worker's transactions
	// land in the measurement.
	_, err = db.ExecContext(ctx, "VACUUM ANALYZE")
	must(tb, err)

	a := e.startAPI("SVC_PODAGENT_BIN="+fakeAgentBin(tb), "SVC_LOG_LEVEL=error")
	project := e.admin("project", "create", "--workspace", acc.workspace, "--name", "target")["id"].(string)
	e.admin("channel", "set", "--project", project, "--secret", "bench-secret")
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	incoming := a.URL + "/api/projects/" + project + "/agent-proxy/agent/channels/webhook/incoming"
	send := func(i int) {
		body := fmt.Sprintf(`{"message":"benchmark %d","senderId":"bench","metadata":{"k":"v"}}`, i)
		req, err := http.NewRequest(http.MethodPost, incoming, bytes.NewReader([]byte(body)))
		must(tb, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Webhook-Secret", "bench-secret")
		req.Header.Set("Authorization", "Bearer "+acc.key)
		res, err := hc.Do(req)
		must(tb, err)
		b, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		if res.StatusCode != http.StatusOK {
			tb.Fatalf("webhook message %d: %d %s", i, res.StatusCode, b)
		}
	}
	// The cold start, then warm connections, prepared statements and caches,
	// as a long-running replica has them.
	for i := 0; i < 50; i++ {
		send(i)
	}

	meter := storetest.NewPGMeterBeside(ctx, tb, db)
	peak := watchBackends(ctx, tb, e.dbURL)
	before := meter.Settle(ctx, tb, pgQuiet)
	peak.reset()
	for i := 0; i < requests; i++ {
		send(1000 + i)
	}
	conns := peak.reset() - 1 // the meter's own connection
	after := meter.Settle(ctx, tb, pgQuiet)
	return webhookPG{perRun: meter.Between(before, after), requests: requests, peakConns: conns}
}

// backendPeak samples the database's connections from another database of
// the same server, so the sampling counts nowhere in the measured one.
type backendPeak struct {
	mu   sync.Mutex
	peak int64
}

func (p *backendPeak) reset() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.peak
	p.peak = 0
	return v
}

func watchBackends(ctx context.Context, tb testing.TB, dbURL string) *backendPeak {
	tb.Helper()
	u, err := url.Parse(dbURL)
	must(tb, err)
	name := u.Path[1:]
	u.Path = "/postgres"
	db, err := sql.Open("pgx", u.String())
	must(tb, err)
	db.SetMaxOpenConns(1)
	p := &backendPeak{}
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			var n int64
			if err := db.QueryRowContext(ctx, "SELECT numbackends FROM pg_stat_database WHERE datname = $1", name).Scan(&n); err != nil {
				return
			}
			p.mu.Lock()
			p.peak = max(p.peak, n)
			p.mu.Unlock()
			time.Sleep(2 * time.Millisecond) // a sampling period, not a synchronisation
		}
	}()
	tb.Cleanup(func() { stop.Store(true); <-done; _ = db.Close() })
	return p
}

// BenchmarkWebhookPG reports PostgreSQL's work per webhook request (inline
// reply) routed to a running pod, with 10 and with 10,000 registered
// projects. b.N is the number of measured requests (-benchtime=200x).
func BenchmarkWebhookPG(b *testing.B) {
	for _, projects := range []int{10, 10000} {
		b.Run(fmt.Sprintf("projects=%d", projects), func(b *testing.B) {
			n := max(b.N, 50)
			b.StopTimer()
			m := measureWebhookPG(b, projects, n)
			m.perRun.Report(b, m.requests, "/req")
			b.ReportMetric(float64(m.peakConns), "pg-conns-peak")
			b.Logf("%d projects, %d requests: %+v, peak %d connections", projects, n, m.perRun, m.peakConns)
		})
	}
}

// TestWebhookPGFlatInProjects: the rows a webhook request reads and writes
// do not grow with the registered projects (a sequential scan of projects,
// or of anything with a row per project, would read 10,000 rows a request).
// With few projects the planner scans the small tables whole, with many it
// takes their indexes: the rows read with 10,000 projects may be fewer, and
// one row a request more (an index scan's heap fetch) is allowed. The rows
// read are those of the service's own tables (sequential and index scans):
// the database-wide counters also hold the system catalogs' rows that a
// connection the pool opens during the requests reads to fill its caches,
// about a hundred a connection, whether or not the pool opens one.
func TestWebhookPGFlatInProjects(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two apiservers and waits for PostgreSQL's idle counter flush")
	}
	const requests = 20
	few, many := measureWebhookPG(t, 10, requests), measureWebhookPG(t, 10000, requests)
	t.Logf("per %d requests\n10 projects: %+v\n10000 projects: %+v", requests, few.perRun, many.perRun)
	read := func(c storetest.PGCounters) int64 { return c.SeqRows + c.IdxRows }
	written := func(c storetest.PGCounters) int64 { return c.Inserted + c.Updated + c.Deleted }
	if f, m := read(few.perRun), read(many.perRun); m > f+requests {
		t.Errorf("rows of the service's tables read by %d requests: %d with 10 projects, %d with 10,000", requests, f, m)
	}
	if f, m := few.perRun.SeqRows, many.perRun.SeqRows; m > f {
		t.Errorf("rows read by sequential scans in %d requests: %d with 10 projects, %d with 10,000", requests, f, m)
	}
	if f, m := written(few.perRun), written(many.perRun); m != f {
		t.Errorf("rows written by %d requests: %d with 10 projects, %d with 10,000", requests, f, m)
	}
}
