package metering

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/auth"
	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/wire"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestGranted(t *testing.T) {
	t.Parallel()
	cases := []struct{ count, n, limit, want int64 }{
		{1, 1, 3, 1}, {3, 1, 3, 1}, {4, 1, 3, 0},
		{10, 10, 1000, 10}, {1000, 10, 1000, 10}, {1005, 10, 1000, 5}, {1010, 10, 1000, 0}, {2000, 10, 1000, 0},
	}
	for _, c := range cases {
		if got := granted(c.count, c.n, c.limit); got != c.want {
			t.Errorf("granted(%d, %d, %d) = %d, want %d", c.count, c.n, c.limit, got, c.want)
		}
	}
	for limit, want := range map[int64]int64{1: 1, 100: 1, 199: 1, 1000: 10, 1_000_000: 64} {
		if got := leaseSize(limit); got != want {
			t.Errorf("leaseSize(%d) = %d, want %d", limit, got, want)
		}
	}
}

// Two replicas (two Meters) on one database admit exactly the limit for
// small limits, and never more than the limit — at most a lease block and
// the quarter leased ahead less per replica — for large ones.
func TestAdmitAcrossReplicas(t *testing.T) {
	t.Parallel()
	st, w := workspace(t)
	ctx := context.Background()
	fixed := fixedNow
	for _, tc := range []struct {
		limit, attempts, minAdmitted int64
	}{
		{3, 20, 3},
		{100, 300, 100},
		{1000, 1500, 1000 - 2*(leaseSize(1000)+leaseSize(1000)/4)},
	} {
		replicas := []*Meter{New(st, nil), New(st, nil)}
		for _, m := range replicas {
			m.Now = func() time.Time { return fixed }
		}
		fixed = fixed.Add(time.Minute) // a fresh window per case
		plan := catalog.Plan{Name: "p", RPM: tc.limit}
		p := auth.Principal{KeyID: "key_" + w.ID, WorkspaceID: w.ID, Billing: store.Billing{UsageBasedPricing: true}}
		var admitted, limited atomic.Int64
		var wg sync.WaitGroup
		for i := int64(0); i < tc.attempts; i++ {
			wg.Add(1)
			go func(m *Meter) {
				defer wg.Done()
				_, err := m.Admit(ctx, p, plan)
				var ae *wire.Error
				switch {
				case err == nil:
					admitted.Add(1)
				case errors.As(err, &ae) && ae.Code == "rate_limited":
					limited.Add(1)
				default:
					t.Error(err)
				}
			}(replicas[i%2])
		}
		wg.Wait()
		if a := admitted.Load(); a > tc.limit || a < tc.minAdmitted || a+limited.Load() != tc.attempts {
			t.Errorf("limit %d: admitted %d, limited %d; want between %d and %d admitted",
				tc.limit, a, limited.Load(), tc.minAdmitted, tc.limit)
		}
	}
}

// A bucket in steady use gets its next block before the last one runs
// out: the request that leaves a quarter of a block starts the lease off
// its path, and the requests after it take permits without a round trip.
// Blocks under prefetchMin are not leased ahead.
func TestRateLeaseAhead(t *testing.T) {
	t.Parallel()
	st, w := workspace(t)
	ctx := context.Background()
	fixed := fixedNow.Add(time.Hour)
	for _, tc := range []struct {
		limit     int64
		requests  int   // admitted one after the other
		wantCount int64 // the shared count afterwards
		wantLeft  int64 // the permits this replica holds afterwards
	}{
		// Blocks of 64: the 48th request leaves 16 and leases the next.
		{6400, 47, 64, 17},
		{6400, 48, 128, 80},
		// Blocks of 4: no lease ahead; the 4th request leaves none.
		{400, 4, 4, 0},
	} {
		m := New(st, nil)
		now := fixed
		m.Now = func() time.Time { return now }
		win := now.Truncate(RateWindow).UnixMilli()
		fixed = fixed.Add(time.Minute) // a fresh window per case
		plan := catalog.Plan{Name: "p", RPM: tc.limit}
		p := auth.Principal{KeyID: "key_" + w.ID, WorkspaceID: w.ID, Billing: store.Billing{UsageBasedPricing: true}}
		for range tc.requests {
			if _, err := m.Admit(ctx, p, plan); err != nil {
				t.Fatal(err)
			}
		}
		m.background.Wait()
		bucket := "key:" + p.KeyID
		counts, err := st.AddRateCounters(ctx, win, []store.RateIncrement{{Bucket: bucket, N: 0}})
		if err != nil {
			t.Fatal(err)
		}
		m.leases.mu.Lock()
		left := m.leases.m[bucket].left
		m.leases.mu.Unlock()
		if counts[bucket] != tc.wantCount || left != tc.wantLeft {
			t.Errorf("limit %d, %d requests: shared count %d, %d permits held; want %d and %d",
				tc.limit, tc.requests, counts[bucket], left, tc.wantCount, tc.wantLeft)
		}
	}
}

// Usage written on this replica is seen by the next admission at once; the
// window cache never hides it.
func TestQuotaSeenAfterWrite(t *testing.T) {
	t.Parallel()
	st, w := workspace(t)
	ctx := context.Background()
	rec := NewRecorder(st, zapNop(), RecorderOptions{SpoolDir: t.TempDir()})
	m := New(st, rec)
	plan := catalog.Plan{Name: "p", Windows: []catalog.Window{{Name: "5h", Duration: 5 * time.Hour, Credits: 0.001}}}
	model := catalog.Model{ID: "m", Price: catalog.Price{InputPerMTok: 1000}}
	p := auth.Principal{WorkspaceID: w.ID}
	if _, err := m.Admit(ctx, p, plan); err != nil {
		t.Fatalf("fresh workspace refused: %v", err)
	}
	// 1000 prompt tokens at 1000 credits per Mtok = 1 credit ≥ the 0.001 window.
	if err := m.Record(ctx, p, plan, model, "r1", Usage{PromptTokens: 1000}, false); err != nil {
		t.Fatal(err)
	}
	if err := rec.Close(ctx); err != nil { // the batch is written and the cache dropped
		t.Fatal(err)
	}
	_, err := m.Admit(ctx, p, plan)
	var ae *wire.Error
	if !errors.As(err, &ae) || ae.Code != "usage_limit_reached" {
		t.Fatalf("after the window was spent: %v, want usage_limit_reached", err)
	}
}

// The usage a replica writes is added to its cached windows (write-through):
// the next admission is decided without reading them back, for at most
// WindowCacheTTL. The database's window is zeroed behind the replica's back
// to tell the two apart: a read would admit, the cache refuses.
func TestWindowsWriteThrough(t *testing.T) {
	t.Parallel()
	st, w := workspace(t)
	ctx := context.Background()
	m := New(st, nil)
	now := fixedNow
	m.Now = func() time.Time { return now }
	plan := catalog.Plan{Name: "p", Windows: []catalog.Window{{Name: "5h", Duration: 5 * time.Hour, Credits: 1}}}
	model := catalog.Model{ID: "m", Price: catalog.Price{InputPerMTok: 1000}} // 600 prompt tokens = 0.6 credits
	p := auth.Principal{WorkspaceID: w.ID}
	spend := func(id string) {
		t.Helper()
		if err := m.Record(ctx, p, plan, model, id, Usage{PromptTokens: 600}, false); err != nil {
			t.Fatal(err)
		}
	}
	spend("r1") // creates the window: the cached (empty) view is dropped
	if _, err := m.Admit(ctx, p, plan); err != nil {
		t.Fatalf("0.6 of 1 credit spent: %v", err)
	}
	if _, err := st.DB().ExecContext(ctx, "UPDATE usage_windows SET credits_micro = 0 WHERE workspace_id = $1", w.ID); err != nil {
		t.Fatal(err)
	}
	spend("r2") // the database holds 0.6 now, this replica's cache 1.2
	var ae *wire.Error
	if _, err := m.Admit(ctx, p, plan); !errors.As(err, &ae) || ae.Code != "usage_limit_reached" {
		t.Fatalf("after this replica's write: %v, want usage_limit_reached from the cached windows", err)
	}
	now = now.Add(WindowCacheTTL)
	if _, err := m.Admit(ctx, p, plan); err != nil {
		t.Fatalf("after WindowCacheTTL the windows are read again (0.6 of 1 credit): %v", err)
	}
}

// Windows in steady use are read again in the background once they are
// windowRefreshAhead old: the admission that finds them so is still
// decided from the cache, and the next sees what the database holds, within
// WindowCacheTTL of the first read. As in TestWindowsWriteThrough, the
// database's window is zeroed behind the replica's back to tell the two
// apart.
func TestWindowsRefreshedAhead(t *testing.T) {
	t.Parallel()
	st, w := workspace(t)
	ctx := context.Background()
	m := New(st, nil)
	now := fixedNow
	m.Now = func() time.Time { return now }
	plan := catalog.Plan{Name: "p", Windows: []catalog.Window{{Name: "5h", Duration: 5 * time.Hour, Credits: 1}}}
	model := catalog.Model{ID: "m", Price: catalog.Price{InputPerMTok: 1000}} // 600 prompt tokens = 0.6 credits
	p := auth.Principal{WorkspaceID: w.ID}
	spend := func(id string) {
		t.Helper()
		if err := m.Record(ctx, p, plan, model, id, Usage{PromptTokens: 600}, false); err != nil {
			t.Fatal(err)
		}
	}
	spend("r1")
	if _, err := m.Admit(ctx, p, plan); err != nil { // reads and caches the windows
		t.Fatalf("0.6 of 1 credit spent: %v", err)
	}
	if _, err := st.DB().ExecContext(ctx, "UPDATE usage_windows SET credits_micro = 0 WHERE workspace_id = $1", w.ID); err != nil {
		t.Fatal(err)
	}
	spend("r2") // the database holds 0.6 now, this replica's cache 1.2
	refused := func(when string) {
		t.Helper()
		var ae *wire.Error
		if _, err := m.Admit(ctx, p, plan); !errors.As(err, &ae) || ae.Code != "usage_limit_reached" {
			t.Fatalf("%s: %v, want usage_limit_reached from the cached windows", when, err)
		}
	}
	refused("before windowRefreshAhead")
	m.background.Wait()
	refused("before windowRefreshAhead, nothing read in the background")
	now = now.Add(windowRefreshAhead)
	refused("at windowRefreshAhead")
	m.background.Wait()
	now = now.Add((WindowCacheTTL - windowRefreshAhead) / 2)
	if _, err := m.Admit(ctx, p, plan); err != nil {
		t.Fatalf("after the background read (0.6 of 1 credit): %v", err)
	}
}

func zapNop() *zap.Logger { return zap.NewNop() }

// fixedNow is the clock of the rate tests: 30 s into a minute.
var fixedNow = time.Date(2026, 5, 1, 12, 0, 30, 0, time.UTC)

// workspace is a fresh Postgres store (the rate counters are shared there)
// holding one workspace on the free plan.
func workspace(t *testing.T) (*store.Store, store.Workspace) {
	t.Helper()
	st := storetest.Postgres(t)
	w, err := st.CreateWorkspace(context.Background(), "w", "free")
	if err != nil {
		t.Fatal(err)
	}
	return st, w
}

// A refused request leases nothing. Once this replica found
// a bucket spent, later requests of the window are refused without a
// database write, and a request refused by one bucket gives back the permits
// it took from the others: the shared counters end at what was admitted
// plus the one lease that found each bucket spent, not one per attempt.
func TestRejectionsLeaseNothing(t *testing.T) {
	st, w := workspace(t)
	ctx := context.Background()
	fixed := fixedNow
	m := New(st, nil)
	m.Now = func() time.Time { return fixed }
	plan := catalog.Plan{Name: "p", RPM: 100, WorkspaceRPM: 3}
	p := auth.Principal{KeyID: "key_" + w.ID, WorkspaceID: w.ID, Billing: store.Billing{UsageBasedPricing: true}}
	admitted := 0
	for range 50 {
		_, err := m.Admit(ctx, p, plan)
		var ae *wire.Error
		switch {
		case err == nil:
			admitted++
		case errors.As(err, &ae) && ae.Code == "rate_limited":
		default:
			t.Fatal(err)
		}
	}
	if admitted != 3 {
		t.Fatalf("admitted %d, want 3", admitted)
	}
	win := fixed.Truncate(RateWindow).UnixMilli()
	counts, err := st.AddRateCounters(ctx, win, []store.RateIncrement{{Bucket: "key:" + p.KeyID}, {Bucket: "ws:" + w.ID}})
	if err != nil {
		t.Fatal(err)
	}
	if k, ws := counts["key:"+p.KeyID], counts["ws:"+w.ID]; k != 4 || ws != 4 {
		t.Fatalf("counters key %d, workspace %d after 3 admitted and 47 refused: want 4 and 4 (one lease found the workspace spent)", k, ws)
	}
	// The key permit the refused request took was given back: the next
	// request without a workspace limit uses it without a write.
	p2 := auth.Principal{KeyID: p.KeyID, WorkspaceID: w.ID, Billing: store.Billing{UsageBasedPricing: true}}
	if _, err := m.Admit(ctx, p2, catalog.Plan{Name: "k", RPM: 100}); err != nil {
		t.Fatalf("key bucket after the refusals: %v", err)
	}
	counts, _ = st.AddRateCounters(ctx, win, []store.RateIncrement{{Bucket: "key:" + p.KeyID}})
	if k := counts["key:"+p.KeyID]; k != 4 {
		t.Fatalf("key counter %d: the given-back permit was not used", k)
	}
}
