package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
)

func TestRuntimeAssignments(t *testing.T) {
	t.Parallel()
	eachProject(t, "p", func(ctx context.Context, t *testing.T, s *store.Store, p store.Project) {
		if _, err := s.GetRuntimeAssignment(ctx, p.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("fresh project: %v", err)
		}
		a1, err := s.PinRuntime(ctx, store.RuntimeAssignment{ProjectID: p.ID, Driver: "local", Endpoint: "http://127.0.0.1:1",
			Instance: "api_a", CloudSyncMode: "git_only"})
		if err != nil || a1.Driver != "local" || a1.Endpoint != "http://127.0.0.1:1" || a1.AssignedAt.IsZero() {
			t.Fatalf("pin: %+v %v", a1, err)
		}
		time.Sleep(5 * time.Millisecond) // distinct timestamps, not synchronisation
		// Same holder, new endpoint (a restart): still the same assignment.
		a2, err := s.PinRuntime(ctx, store.RuntimeAssignment{ProjectID: p.ID, Driver: "local", Endpoint: "http://127.0.0.1:2", Instance: "api_a"})
		if err != nil || a2.Endpoint != "http://127.0.0.1:2" || !a2.AssignedAt.Equal(a1.AssignedAt) || !a2.UpdatedAt.After(a1.UpdatedAt) {
			t.Fatalf("re-pin by the same holder: %+v (first %+v) %v", a2, a1, err)
		}
		// Another holder: a new assignment.
		a3, err := s.PinRuntime(ctx, store.RuntimeAssignment{ProjectID: p.ID, Driver: "local", Endpoint: "http://127.0.0.1:3", Instance: "api_b"})
		if err != nil || !a3.AssignedAt.After(a1.AssignedAt) {
			t.Fatalf("pin by another holder: %+v %v", a3, err)
		}
		if ok, err := s.UnpinRuntime(ctx, p.ID, "local", "api_a"); ok || err != nil {
			t.Fatalf("unpin by a former holder removed the row: %v %v", ok, err)
		}
		if ok, err := s.UnpinRuntime(ctx, p.ID, "local", ""); !ok || err != nil {
			t.Fatalf("unpin: %v %v", ok, err)
		}
	})
}

func TestPairingTokensPinAndUnpin(t *testing.T) {
	t.Parallel()
	eachProject(t, "p", func(ctx context.Context, t *testing.T, s *store.Store, p store.Project) {
		if _, err := s.CreatePairingToken(ctx, store.PairingToken{Credential: store.Credential{ID: "pair_x", Prefix: "svc_pt_x"}, ProjectID: "prj_missing", TokenHash: "h"}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("token for a missing project: %v", err)
		}
		if _, err := s.PinRuntime(ctx, store.RuntimeAssignment{ProjectID: p.ID, Driver: "local", Endpoint: "http://x", Instance: "api_a"}); err != nil {
			t.Fatal(err)
		}
		tok, err := s.CreatePairingToken(ctx, store.PairingToken{Credential: store.Credential{ID: "pair_a", Name: "laptop", Prefix: "svc_pt_a"}, ProjectID: p.ID, TokenHash: "hash-a"})
		if err != nil || tok.CreatedAt.IsZero() {
			t.Fatalf("create: %+v %v", tok, err)
		}
		a, err := s.GetRuntimeAssignment(ctx, p.ID)
		if err != nil || a.Driver != store.DriverPaired || a.Instance != "pair_a" || a.Endpoint != "" {
			t.Fatalf("pairing pins the project: %+v %v", a, err)
		}
		got, err := s.PairMachine(ctx, "pair_a", "http://10.0.0.1:8080", time.Now())
		if err != nil || got.LastConnectedAt == nil || got.TokenHash != "hash-a" {
			t.Fatalf("pair machine: %+v %v", got, err)
		}
		if a, err := s.GetRuntimeAssignment(ctx, p.ID); err != nil || a.Endpoint != "http://10.0.0.1:8080" || a.Instance != "pair_a" {
			t.Fatalf("the assignment names the replica holding the tunnel: %+v %v", a, err)
		}
		// The machine reconnects to another replica; the first one's late
		// release must not clear the newer holder.
		if _, err := s.PairMachine(ctx, "pair_a", "http://10.0.0.2:8080", time.Now()); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.ReleasePairedMachine(ctx, p.ID, "pair_a", "http://10.0.0.1:8080"); ok || err != nil {
			t.Fatalf("release by a former holder: %v %v", ok, err)
		}
		if ok, err := s.ReleasePairedMachine(ctx, p.ID, "pair_other", "http://10.0.0.2:8080"); ok || err != nil {
			t.Fatalf("release of another token: %v %v", ok, err)
		}
		if ok, err := s.ReleasePairedMachine(ctx, p.ID, "pair_a", "http://10.0.0.2:8080"); !ok || err != nil {
			t.Fatalf("release by the holder: %v %v", ok, err)
		}
		if a, err := s.GetRuntimeAssignment(ctx, p.ID); err != nil || a.Endpoint != "" || a.Driver != store.DriverPaired || a.Instance != "pair_a" {
			t.Fatalf("after release the project stays pinned, with no holder: %+v %v", a, err)
		}
		ts, err := s.ListPairingTokens(ctx, p.ID)
		if err != nil || len(ts) != 1 || ts[0].ID != "pair_a" {
			t.Fatalf("list: %+v %v", ts, err)
		}
		r, err := s.RevokePairingToken(ctx, "pair_a")
		if err != nil || r.RevokedAt == nil {
			t.Fatalf("revoke: %+v %v", r, err)
		}
		if _, err := s.GetRuntimeAssignment(ctx, p.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("revoking the pinned machine's token unpins the project: %v", err)
		}
		if _, err := s.PairMachine(ctx, "pair_a", "http://10.0.0.1:8080", time.Now()); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a revoked token pairs: %v", err)
		}
		if _, err := s.RevokePairingToken(ctx, "pair_missing"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("revoke a missing token: %v", err)
		}
	})
}

// The first replica to name a generation's runtime wins; the others read its
// name; a newer generation starts unnamed; a stale generation is refused.
func TestReserveRuntimeInstance(t *testing.T) {
	t.Parallel()
	eachProject(t, "p", func(ctx context.Context, t *testing.T, s *store.Store, p store.Project) {
		a, err := s.ClaimRuntime(ctx, p.ID, "kubernetes", "git_only")
		if err != nil || a.Generation != 1 {
			t.Fatalf("claim: %+v %v", a, err)
		}
		steps := []struct {
			gen            int64
			instance, want string
			err            error
		}{
			{1, "svc-rt-spare-0-1", "svc-rt-spare-0-1", nil},
			{1, "svc-rt-p-g1", "svc-rt-spare-0-1", nil},
			{2, "svc-rt-p-g2", "svc-rt-spare-0-1", store.ErrStaleGeneration},
		}
		for i, st := range steps {
			got, err := s.ReserveRuntimeInstance(ctx, p.ID, "kubernetes", st.gen, st.instance)
			if !errors.Is(err, st.err) || got.Instance != st.want {
				t.Errorf("step %d: %+v %v, want instance %q error %v", i, got, err, st.want, st.err)
			}
		}
		if a, err = s.AdvanceRuntime(ctx, p.ID, "kubernetes", 1); err != nil || a.Instance != "" {
			t.Fatalf("advance: %+v %v", a, err)
		}
		if got, err := s.ReserveRuntimeInstance(ctx, p.ID, "kubernetes", 2, "svc-rt-p-g2"); err != nil || got.Instance != "svc-rt-p-g2" {
			t.Errorf("the next generation: %+v %v", got, err)
		}
	})
}
