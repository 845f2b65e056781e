package store_test

import (
	"context"
	"testing"

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
