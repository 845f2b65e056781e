package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
)

// Roles are owner or member, enforced by the database too (migration 00009).
func TestMembershipRoles(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		ws, _ := st.CreateWorkspace(ctx, "w", "free")
		u, _ := st.CreateUser(ctx, store.NewID("u")+"@x.test")
		m, err := st.AddMember(ctx, ws.ID, u.ID)
		if err != nil || m.Role != store.RoleMember {
			t.Fatalf("add: %+v %v", m, err)
		}
		if m, err = st.SetMember(ctx, ws.ID, u.ID, store.RoleOwner); err != nil || m.Role != store.RoleOwner {
			t.Fatalf("promote: %+v %v", m, err)
		}
		if _, err := st.SetMember(ctx, ws.ID, u.ID, "admin"); err == nil {
			t.Fatal("role admin accepted")
		}
		for _, q := range []string{
			"UPDATE memberships SET role = 'admin' WHERE user_id = '" + u.ID + "'",
			"INSERT INTO memberships (workspace_id, user_id, role) VALUES ('" + ws.ID + "', '" + u.ID + "x', 'root')",
		} {
			if _, err := st.DB().ExecContext(ctx, q); err == nil {
				t.Fatalf("the database accepted %s", q)
			}
		}
		wss, err := st.ListUserWorkspaces(ctx, u.ID)
		if err != nil || len(wss) != 1 || wss[0].Role != store.RoleOwner || wss[0].Name != "w" {
			t.Fatalf("workspaces %+v %v", wss, err)
		}
	})
}

// A sign-in link is used once even when two requests race for it, and an
// expired one is refused.
func TestLoginTokenIsConsumedOnce(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		u, _ := st.CreateUser(ctx, store.NewID("u")+"@x.test")
		now := time.Now().UTC()
		for _, h := range []string{"h-live", "h-old"} {
			exp := now.Add(time.Minute)
			if h == "h-old" {
				exp = now.Add(-time.Second)
			}
			if err := st.CreateLoginToken(ctx, store.LoginToken{TokenHash: h, UserID: u.ID, CreatedAt: now, ExpiresAt: exp}); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		results := make([]error, 8)
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, results[i] = st.ConsumeLoginToken(ctx, "h-live", now)
			}()
		}
		wg.Wait()
		wins := 0
		for _, err := range results {
			switch {
			case err == nil:
				wins++
			case !errors.Is(err, store.ErrTokenUsed):
				t.Fatalf("unexpected error %v", err)
			}
		}
		if wins != 1 {
			t.Fatalf("%d requests used the link, want 1", wins)
		}
		if _, err := st.ConsumeLoginToken(ctx, "h-old", now); !errors.Is(err, store.ErrTokenUsed) {
			t.Fatalf("expired link: %v", err)
		}
		// Sessions: stored by hash, pruned after their absolute expiry.
		if err := st.CreateSession(ctx, store.Session{TokenHash: "s1", UserID: u.ID, CSRFToken: "c", CreatedAt: now,
			LastSeenAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if n, err := st.PruneSessions(ctx, now.Add(2*time.Hour)); err != nil || n != 3 {
			t.Fatalf("pruned %d (%v), want the session and both links", n, err)
		}
		if _, err := st.GetSession(ctx, "s1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("session after prune: %v", err)
		}
	})
}
