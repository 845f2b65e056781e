package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/testenv"
)

// A database outage is not a gateway outage: two replicas reach
// PostgreSQL through a fault proxy that cuts every connection for the
// outage (SVC_TEST_DB_OUTAGE, default 3 s; the shared server itself is
// never stopped); four clients keep sending with a key both replicas know.
// No request fails, and once the database is back every answered request
// has exactly one usage row.
func TestDatabaseOutageServesKnownKeys(t *testing.T) {
	t.Parallel()
	outage := 3 * time.Second
	if v := os.Getenv("SVC_TEST_DB_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		must(t, err)
		outage = d
	}
	e := newEnv(t)
	acc := e.account("bench")
	u, err := url.Parse(e.dbURL)
	must(t, err)
	proxy := testenv.NewFaultProxy(t, u.Host)
	direct := e.dbURL
	e.dbURL, err = proxy.RewriteURL(direct)
	must(t, err)
	replicas := []*api{e.startAPI(), e.startAPI()}
	e.dbURL = direct
	for _, a := range replicas { // each replica reads the key and the workspace
		_, err := client(a.URL+"/v1", acc.key).Chat.Completions.New(context.Background(), userMsg("warm"))
		must(t, err)
	}
	waitUsage(t, e, acc.workspace, 2)

	var ok, failed atomic.Int64
	var firstErr sync.Once
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func(a *api) {
			defer wg.Done()
			c := client(a.URL+"/v1", acc.key)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := c.Chat.Completions.New(context.Background(), userMsg("load")); err != nil {
					failed.Add(1)
					firstErr.Do(func() { t.Errorf("a request of a known key failed during the outage: %v", err) })
					continue
				}
				ok.Add(1)
			}
		}(replicas[i%2])
	}
	proxy.SetDown(true)
	// Readiness stays: a probe failing on every replica would take the
	// gateway out of its load balancer.
	for _, a := range replicas {
		resp, err := http.Get(a.URL + "/readyz")
		must(t, err)
		var ready map[string]string
		must(t, json.NewDecoder(resp.Body).Decode(&ready))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || ready["status"] != "degraded" || ready["database"] != "unavailable" {
			t.Errorf("/readyz during the outage: %d %v, want 200 degraded", resp.StatusCode, ready)
		}
	}
	<-time.After(outage) // the outage's length is what is tested
	beforeRecovery := ok.Load()
	proxy.SetDown(false)
	<-time.After(outage / 3) // load goes on across the recovery
	close(stop)
	wg.Wait()
	if failed.Load() != 0 || beforeRecovery == 0 {
		t.Fatalf("%d requests failed, %d answered during the outage", failed.Load(), beforeRecovery)
	}
	want := ok.Load() + 2
	waitUsage(t, e, acc.workspace, want)
	db, err := sql.Open("pgx", direct)
	must(t, err)
	defer db.Close()
	var rows, distinct int64
	must(t, db.QueryRow(`SELECT count(*), count(DISTINCT (request_id, created_at)) FROM usage_records WHERE workspace_id = $1`,
		acc.workspace).Scan(&rows, &distinct))
	if rows != want || distinct != want {
		t.Fatalf("%d usage rows (%d distinct), want each of the %d answered requests once", rows, distinct, want)
	}
	t.Logf("outage %v: %d requests answered during it, %d in all, 0 failed, %d usage rows", outage, beforeRecovery, ok.Load(), rows)
}
