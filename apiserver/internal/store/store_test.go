package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/shared/syncmode"
	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/wire"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func fixture(t *testing.T, s *store.Store) (store.Workspace, store.User) {
	t.Helper()
	ctx := context.Background()
	w, err := s.CreateWorkspace(ctx, "acme", "free")
	if err != nil {
		t.Fatal(err)
	}
	u, err := s.CreateUser(ctx, "dev@acme.test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddMember(ctx, w.ID, u.ID); err != nil {
		t.Fatal(err)
	}
	return w, u
}

// newProject makes a project named name in a fresh workspace.
func newProject(t *testing.T, s *store.Store, name string) store.Project {
	t.Helper()
	w, _ := fixture(t, s)
	p, err := s.CreateProject(context.Background(), w.ID, name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// eachProject runs test on both dialects, each with a new project (named
// name) of a new workspace.
func eachProject(t *testing.T, name string, test func(ctx context.Context, t *testing.T, s *store.Store, p store.Project)) {
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		test(context.Background(), t, s, newProject(t, s, name))
	})
}

func TestAccountsAndKeys(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		w, u := fixture(t, s)
		if _, err := s.CreateUser(ctx, "dev@acme.test"); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("duplicate email: got %v, want ErrConflict", err)
		}
		if _, err := s.AddMember(ctx, w.ID, u.ID); err != nil {
			t.Fatalf("adding a member twice must be a no-op, got %v", err)
		}
		if ok, err := s.IsMember(ctx, w.ID, u.ID); err != nil || !ok {
			t.Fatalf("IsMember = %v, %v", ok, err)
		}
		if ok, _ := s.IsMember(ctx, w.ID, "usr_other"); ok {
			t.Fatal("a stranger is not a member")
		}
		k, err := s.CreateAPIKey(ctx, store.APIKey{Credential: store.Credential{ID: "key_abc", Prefix: "svc_sk_abc"}, WorkspaceID: w.ID, UserID: u.ID, KeyHash: "h"})
		if err != nil {
			t.Fatal(err)
		}
		yes := true
		if _, err := s.UpdateWorkspace(ctx, w.ID, nil, &yes); err != nil {
			t.Fatal(err)
		}
		ka, err := s.LookupKey(ctx, k.ID)
		if err != nil {
			t.Fatal(err)
		}
		if ka.WorkspaceID != w.ID || ka.UserID != u.ID || ka.Plan != "free" || !ka.UsageBasedPricing || ka.Revoked || ka.KeyHash != "h" {
			t.Fatalf("LookupKey = %+v", ka)
		}
		if _, err := s.RevokeAPIKey(ctx, k.ID); err != nil {
			t.Fatal(err)
		}
		if ka, _ := s.LookupKey(ctx, k.ID); !ka.Revoked {
			t.Fatal("revoked key must read as revoked")
		}
		if _, err := s.LookupKey(ctx, "key_missing"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("missing key: %v", err)
		}
		if _, err := s.UpdateWorkspace(ctx, "ws_missing", nil, &yes); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("missing workspace: %v", err)
		}
	})
}

func TestProjectsDefaultToGitOnly(t *testing.T) {
	t.Parallel()
	eachProject(t, "site", func(ctx context.Context, t *testing.T, s *store.Store, p store.Project) {
		if p.CloudSyncMode != syncmode.GitOnly {
			t.Fatalf("new project mode = %q, want git_only (spec 9)", p.CloudSyncMode)
		}
		if p, err := s.SetSyncMode(ctx, p.ID, syncmode.DualShadow); err != nil || p.CloudSyncMode != syncmode.DualShadow {
			t.Fatalf("SetSyncMode = %+v, %v", p, err)
		}
		if _, err := s.SetSyncMode(ctx, p.ID, "bogus"); err == nil {
			t.Fatal("an unknown mode must be refused")
		}
		if p, err := s.SetPublished(ctx, p.ID, "abc", "publish/site/1"); err != nil || p.PublishedTag != "publish/site/1" {
			t.Fatalf("SetPublished = %+v, %v", p, err)
		}
	})
}

func TestRecordCheckpointIsIdempotent(t *testing.T) {
	t.Parallel()
	eachProject(t, "site", func(ctx context.Context, t *testing.T, s *store.Store, p store.Project) {
		rec := wire.CheckpointRecord{CommitSHA: "0123456789abcdef0123456789abcdef01234567",
			CommitSummary: wire.CommitSummary{Message: "turn 1", Author: "agent", Branch: "main", FilesChanged: 2, Additions: 10},
			CreatedAt:     time.Now()}
		id1, created, err := s.RecordCheckpoint(ctx, p.ID, rec, store.SourcePod)
		if err != nil || !created {
			t.Fatalf("first record: %v created=%v", err, created)
		}
		id2, created, err := s.RecordCheckpoint(ctx, p.ID, rec, store.SourcePod)
		if err != nil || created || id2 != id1 {
			t.Fatalf("second record: id %s vs %s, created=%v, err=%v", id2, id1, created, err)
		}
		cps, err := s.ListCheckpoints(ctx, p.ID, 10)
		if err != nil || len(cps) != 1 || cps[0].FilesChanged != 2 || cps[0].Source != store.SourcePod {
			t.Fatalf("rows = %+v, %v", cps, err)
		}
		shas, _ := s.CheckpointSHAs(ctx, p.ID)
		if !shas[rec.CommitSHA] || len(shas) != 1 {
			t.Fatalf("CheckpointSHAs = %v", shas)
		}
	})
}

func TestChannels(t *testing.T) {
	t.Parallel()
	eachProject(t, "site", func(ctx context.Context, t *testing.T, s *store.Store, p store.Project) {
		secret, headers := "s3cret", `{"X-Team":"a"}`
		c, err := s.SetChannel(ctx, p.ID, &secret, nil)
		if err != nil || c.Secret != "s3cret" || c.CallbackHeaders != "{}" {
			t.Fatalf("first set: %+v %v", c, err)
		}
		c2, err := s.SetChannel(ctx, p.ID, nil, &headers)
		if err != nil || c2.ID != c.ID || c2.Secret != "s3cret" || c2.CallbackHeaders != headers {
			t.Fatalf("second set must keep id and secret: %+v %v", c2, err)
		}
	})
}

func TestUsageWindowsRoll(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		w, _ := fixture(t, s)
		specs := []store.WindowSpec{{Name: "5h", Duration: 5 * time.Hour}, {Name: "month", Duration: 720 * time.Hour}}
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		steps := []struct {
			at            time.Time
			credits       int64
			want5h, wantM int64
		}{
			{t0, 100, 100, 100},
			{t0.Add(time.Hour), 50, 150, 150},
			{t0.Add(5 * time.Hour), 7, 7, 157}, // the 5h window closed at exactly t0+5h
			{t0.Add(6 * time.Hour), 3, 10, 160},
		}
		for i, st := range steps {
			rec := store.UsageRecord{RequestID: "r", WorkspaceID: w.ID, Model: "m", CreditsMicro: st.credits}
			if err := s.RecordUsage(ctx, rec, specs, st.at); err != nil {
				t.Fatal(err)
			}
			ws, err := s.UsageWindows(ctx, w.ID)
			if err != nil || len(ws) != 2 {
				t.Fatalf("step %d: %v %v", i, ws, err)
			}
			got := map[string]int64{ws[0].WindowName: ws[0].CreditsMicro, ws[1].WindowName: ws[1].CreditsMicro}
			if got["5h"] != st.want5h || got["month"] != st.wantM {
				t.Fatalf("step %d: windows %v, want 5h=%d month=%d", i, got, st.want5h, st.wantM)
			}
		}
		tot, err := s.SumUsage(ctx, w.ID)
		if err != nil || tot.Requests != 4 || tot.CreditsMicro != 160 {
			t.Fatalf("SumUsage = %+v, %v", tot, err)
		}
	})
}

// Concurrent increments on one bucket are all counted: the limit is shared.
func TestRateCountersAreAtomic(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		const n = 40
		var wg sync.WaitGroup
		seen := make(chan int64, n)
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := s.IncrRateCounters(ctx, 60_000, "key:a", "ws:w")
				if err != nil {
					t.Error(err)
					return
				}
				if c["ws:w"] != c["key:a"] {
					t.Errorf("both buckets move together: %v", c)
				}
				seen <- c["key:a"]
			}()
		}
		wg.Wait()
		close(seen)
		got := map[int64]bool{}
		for c := range seen {
			if got[c] {
				t.Fatalf("count %d returned twice: increments were lost", c)
			}
			got[c] = true
		}
		if len(got) != n || !got[n] {
			t.Fatalf("want counts 1..%d, got %v", n, got)
		}
		if pruned, err := s.PruneRateCounters(ctx, time.UnixMilli(120_000)); err != nil || pruned != 2 {
			t.Fatalf("prune = %d, %v", pruned, err)
		}
	})
}

// Admit adds each bucket's increment and reads the workspace's usage
// windows in one call (one statement on PostgreSQL): the counts returned
// are the counters after the increments, the windows those written.
func TestAdmitCountsAndWindows(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		ws, err := s.CreateWorkspace(ctx, "admit", "free")
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		rec := store.UsageRecord{RequestID: "r", WorkspaceID: ws.ID, Model: "m", CreditsMicro: 42, CreatedAt: now}
		if err := s.RecordUsage(ctx, rec, []store.WindowSpec{{Name: "5h", Duration: 5 * time.Hour}}, now); err != nil {
			t.Fatal(err)
		}
		incr := []store.RateIncrement{{Bucket: "key:k", N: 64}, {Bucket: "ws:" + ws.ID, N: 3}}
		for round := int64(1); round <= 2; round++ {
			st, err := s.Admit(ctx, 60_000, incr, ws.ID, true)
			if err != nil {
				t.Fatal(err)
			}
			if st.Counts["key:k"] != 64*round || st.Counts["ws:"+ws.ID] != 3*round || len(st.Counts) != 2 {
				t.Fatalf("round %d: counts %v", round, st.Counts)
			}
			if len(st.Windows) != 1 || st.Windows[0].WindowName != "5h" || st.Windows[0].CreditsMicro != 42 ||
				st.Windows[0].ResetsAt <= now.UnixMilli() || st.Windows[0].WorkspaceID != ws.ID {
				t.Fatalf("round %d: windows %+v", round, st.Windows)
			}
		}
		st, err := s.Admit(ctx, 60_000, incr[:1], ws.ID, false)
		if err != nil || st.Counts["key:k"] != 192 || st.Windows != nil {
			t.Fatalf("without windows: %+v %v", st, err)
		}
	})
}
