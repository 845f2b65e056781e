package metering

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/auth"
	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/wire"
)

// clock is a test's clock, advanced by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// PostgreSQL goes away under two replicas (a fault proxy resets every
// connection): a workspace both know keeps being admitted against its
// last known window plus each replica's own unwritten spend, until each
// replica's view is spent; usage is spooled (one replica's spills to its
// file); a workspace neither knows, and a fail-closed replica, get 503.
// When the database is back every record is written exactly once and the
// spend is within the stated bound: each replica at most the window's
// remainder at the outage's start.
func TestDatabaseOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	realURL := storetest.PostgresURL(t)
	u, err := url.Parse(realURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewFaultProxy(t, u.Host)
	viaProxy, err := proxy.RewriteURL(realURL)
	if err != nil {
		t.Fatal(err)
	}
	direct := openStore(t, realURL)
	ws, err := direct.CreateWorkspace(ctx, "known", "free")
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := direct.CreateWorkspace(ctx, "unknown", "free")
	if err != nil {
		t.Fatal(err)
	}
	// 1 credit; a request of 10 prompt tokens at 1000 credits per Mtok costs 0.01.
	plan := catalog.Plan{Name: "p", RPM: 100000, Windows: []catalog.Window{{Name: "5h", Duration: 5 * time.Hour, Credits: 1}}}
	model := catalog.Model{ID: "m", Price: catalog.Price{InputPerMTok: 1000}}
	const cost, limit = 10_000, 1_000_000
	p := auth.Principal{WorkspaceID: ws.ID}
	clk := &clock{t: time.Now()}

	type replica struct {
		m       *Meter
		rec     *Recorder
		spool   string
		records int
	}
	var replicas []*replica
	for i := range 2 {
		dir := t.TempDir()
		o := RecorderOptions{SpoolDir: dir, RetryEvery: 10 * time.Millisecond}
		if i == 0 {
			o.SpoolMemory = 5 // past 5 records, this one spools to its file
		}
		rec := NewRecorder(openStore(t, viaProxy), zapNop(), o)
		m := New(rec.store, rec)
		m.Now, m.ServeFor = clk.now, time.Minute
		replicas = append(replicas, &replica{m: m, rec: rec, spool: filepath.Join(dir, SpoolFile)})
	}
	n := 0
	request := func(r *replica, who auth.Principal) error {
		if _, err := r.m.Admit(ctx, who, plan); err != nil {
			return err
		}
		n++
		r.records++
		return r.m.Record(ctx, who, plan, model, fmt.Sprintf("req-%d", n), Usage{PromptTokens: 10}, false)
	}
	// Before the outage: each replica serves (and so reads) the workspace.
	for _, r := range replicas {
		for range 10 {
			if err := request(r, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, r := range replicas { // written, so the last known window is exact
		waitFor(t, func() bool { return len(r.rec.Unsynced(ws.ID)) == 0 })
	}
	clk.add(2 * WindowCacheTTL)
	for _, r := range replicas { // the windows as the outage finds them: 20 requests
		if err := request(r, p); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return len(r.rec.Unsynced(ws.ID)) == 0 })
	}
	before := n
	failClosed := New(openStore(t, viaProxy), nil)
	failClosed.Now = clk.now

	proxy.SetDown(true)
	clk.add(2 * WindowCacheTTL) // past the window cache: admission needs the database
	for name, check := range map[string]func() error{
		"unknown workspace": func() error {
			_, err := replicas[0].m.Admit(ctx, auth.Principal{WorkspaceID: stranger.ID}, plan)
			return err
		},
		"fail-closed": func() error { _, err := failClosed.Admit(ctx, p, plan); return err },
	} {
		var ae *wire.Error
		if err := check(); !errors.As(err, &ae) || ae.Code != "service_unavailable" {
			t.Errorf("%s during the outage: %v, want service_unavailable", name, err)
		}
	}
	for i, r := range replicas {
		for {
			err := request(r, p)
			if err == nil {
				continue
			}
			var ae *wire.Error
			if !errors.As(err, &ae) || ae.Code != "usage_limit_reached" {
				t.Fatalf("replica %d after %d requests in the outage: %v, want admissions until usage_limit_reached", i, n-before, err)
			}
			break
		}
	}
	// Each replica spends what was left as it last knew it: replica 0 read
	// the window at 20 requests and wrote its 21st since, replica 1 read it
	// at 21 and wrote its 22nd: 79 and 78 requests.
	if during := n - before; during != (100-21)+(100-22) {
		t.Errorf("%d requests admitted during the outage, want %d", during, (100-21)+(100-22))
	}
	// The records of the outage reach the recorder's loop through its
	// queue: replica 0 spools them, past its memory bound (5) to its file.
	waitFor(t, func() bool { return replicas[0].rec.Spooled() > 5 })
	if _, err := os.Stat(replicas[0].spool); err != nil {
		t.Errorf("the spool file of the replica past its memory bound: %v", err)
	}

	proxy.SetDown(false)
	for _, r := range replicas {
		if err := r.rec.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(r.spool); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("spool file left after the database came back: %v", err)
		}
	}
	var rows, distinct int64
	if err := direct.DB().QueryRowContext(ctx, `SELECT count(*), count(DISTINCT request_id) FROM usage_records WHERE workspace_id = $1`, ws.ID).
		Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != int64(n) || distinct != int64(n) {
		t.Errorf("%d usage rows (%d distinct request ids), want each of the %d requests once", rows, distinct, n)
	}
	w, err := direct.UsageWindows(ctx, ws.ID)
	if err != nil || len(w) != 1 || w[0].CreditsMicro != int64(n)*cost {
		t.Fatalf("windows %+v (%v), want %d credits-micro", w, err, int64(n)*cost)
	}
	// The overspend: the window's remainder at the outage's start once more
	// per further replica, plus what the others spent within the window
	// cache's age before it (one request here).
	if over := w[0].CreditsMicro - limit; over > (limit-22*cost)*int64(len(replicas)-1)+cost {
		t.Errorf("window overspent by %d credits-micro, above the bound", over)
	}
}

func openStore(t *testing.T, url string) *store.Store {
	t.Helper()
	s, err := store.Open(url, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// waitFor polls cond (a background writer's progress) for up to 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(5 * time.Millisecond) // polling a background writer
	}
}

// A key budget through an outage: the key's last known row plus this
// replica's spend admits, then refuses with 402; settlements the database
// refused (a reservation taken before the outage, a request admitted
// during it) are kept and written before the next one once it is back, so
// the key's counter ends exact and no reservation is left in flight.
func TestKeyBudgetThroughOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	realURL := storetest.PostgresURL(t)
	u, err := url.Parse(realURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewFaultProxy(t, u.Host)
	viaProxy, err := proxy.RewriteURL(realURL)
	if err != nil {
		t.Fatal(err)
	}
	direct := openStore(t, realURL)
	w, err := direct.CreateWorkspace(ctx, "budget", "free")
	if err != nil {
		t.Fatal(err)
	}
	usr, err := direct.CreateUser(ctx, "outage@example.com")
	if err != nil {
		t.Fatal(err)
	}
	k, err := direct.CreateAPIKey(ctx, store.APIKey{Credential: store.Credential{ID: "ko" + w.ID, Prefix: "svc_sk_ko"},
		WorkspaceID: w.ID, UserID: usr.ID, KeyHash: "unused"})
	if err != nil {
		t.Fatal(err)
	}
	if err := direct.SetKeyBudget(ctx, k.ID, 5*credit/2, store.BudgetDaily); err != nil {
		t.Fatal(err)
	}
	p := auth.Principal{KeyID: k.ID, UserID: usr.ID, WorkspaceID: w.ID, KeyBudget: true, Billing: store.Billing{UsageBasedPricing: true}}
	plan := catalog.Plan{Name: "p"}
	one := Usage{PromptTokens: 1000} // one credit
	m := New(openStore(t, viaProxy), nil)
	m.ServeFor = time.Minute

	adm1, err := m.Admit(ctx, p, plan)
	if err != nil || !adm1.KeyBudget {
		t.Fatalf("before the outage: %+v, %v", adm1, err)
	}
	if err := m.Settle(ctx, p, adm1, oneCredit, &one); err != nil {
		t.Fatal(err)
	}
	adm2, err := m.Admit(ctx, p, plan) // in flight across the outage
	if err != nil || !adm2.KeyBudget || adm2.Unreserved {
		t.Fatalf("reservation before the outage: %+v, %v", adm2, err)
	}

	proxy.SetDown(true)
	if err := m.Settle(ctx, p, adm2, oneCredit, &one); err == nil {
		t.Fatal("a settlement went through with the database down")
	}
	// Known: 1 credit used at the last read; 2.5 allowed: two more
	// requests' admissions (1 and 2 credits spent here), then 402.
	for i, want := range []string{"", "", "key_budget_exceeded"} {
		adm, err := m.Admit(ctx, p, plan)
		var ae *wire.Error
		switch {
		case want == "" && (err != nil || !adm.Unreserved):
			t.Fatalf("request %d during the outage: %+v, %v; want admitted without a reservation", i, adm, err)
		case want != "" && (!errors.As(err, &ae) || ae.Code != want):
			t.Fatalf("request %d during the outage: %v, want %s", i, err, want)
		case want != "":
			continue
		}
		_ = m.Record(ctx, p, plan, oneCredit, fmt.Sprintf("o%d", i), one, false) // counted locally; the write fails
		if err := m.Settle(ctx, p, adm, oneCredit, &one); err == nil {
			t.Fatal("a settlement went through with the database down")
		}
	}

	proxy.SetDown(false)
	// The next admission writes the three kept settlements first (4
	// credits used, nothing in flight), then finds the budget spent.
	_, err = m.Admit(ctx, p, plan)
	var ae *wire.Error
	if !errors.As(err, &ae) || ae.Code != "key_budget_exceeded" {
		t.Fatalf("after the outage: %v, want key_budget_exceeded", err)
	}
	b, err := direct.GetKeyBudget(ctx, k.ID)
	if err != nil || b.CreditsMicro != 4*credit || b.Inflight != 0 {
		t.Fatalf("budget after recovery %+v (%v), want 4 credits used and nothing in flight", b, err)
	}
}

// A replica stopped while the database is down leaves its spool in the
// file; the next start writes it, once.
func TestSpoolSurvivesRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	realURL := storetest.PostgresURL(t)
	u, err := url.Parse(realURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewFaultProxy(t, u.Host)
	viaProxy, err := proxy.RewriteURL(realURL)
	if err != nil {
		t.Fatal(err)
	}
	direct := openStore(t, realURL)
	ws, err := direct.CreateWorkspace(ctx, "restart", "free")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	st := openStore(t, viaProxy)
	win := []store.WindowSpec{{Name: "5h", Duration: 5 * time.Hour}}
	proxy.SetDown(true)
	first := NewRecorder(st, zapNop(), RecorderOptions{SpoolDir: dir, SpoolMemory: 2, RetryEvery: time.Millisecond})
	for i := range 5 {
		first.Enqueue(store.UsageRecord{RequestID: fmt.Sprintf("s%d", i), WorkspaceID: ws.ID, Model: "m", CreditsMicro: 3}, win)
	}
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, SpoolFile)); err != nil {
		t.Fatalf("no spool file after a stop with the database down: %v", err)
	}
	proxy.SetDown(false)
	second := NewRecorder(st, zapNop(), RecorderOptions{SpoolDir: dir})
	waitFor(t, func() bool { return second.Spooled() == 0 && !fileExists(filepath.Join(dir, SpoolFile)) })
	if err := second.Close(ctx); err != nil {
		t.Fatal(err)
	}
	tot, err := direct.SumUsage(ctx, ws.ID)
	if err != nil || tot.Requests != 5 || tot.CreditsMicro != 15 {
		t.Fatalf("after the restart: %+v (%v), want the 5 spooled records once", tot, err)
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
