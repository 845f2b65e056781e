package apikey_test

import (
	"context"
	"strings"
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/apikey"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
)

// Issue gives a member a key whose hash is stored under its id (the plain
// key is returned once), and gives a non-member an error and no key.
func TestIssue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.SQLite(t)
	ws, err := st.CreateWorkspace(ctx, "ws", "free")
	if err != nil {
		t.Fatal(err)
	}
	member, _ := st.CreateUser(ctx, "m@example.test")
	stranger, _ := st.CreateUser(ctx, "s@example.test")
	if _, err := st.AddMember(ctx, ws.ID, member.ID); err != nil {
		t.Fatal(err)
	}

	k, err := apikey.Issue(ctx, st, ws.ID, member.ID, "ci")
	if err != nil || !strings.HasPrefix(k.Key, apikey.Prefix) || k.ID == "" || !strings.HasPrefix(k.Key, k.Prefix) {
		t.Fatalf("Issue = %+v, %v", k, err)
	}
	if _, err := apikey.Issue(ctx, st, ws.ID, stranger.ID, "nope"); err == nil || !strings.Contains(err.Error(), "not a member") {
		t.Fatalf("a non-member got a key: %v", err)
	}
	keys, err := st.ListAPIKeys(ctx, ws.ID)
	if err != nil || len(keys) != 1 || keys[0].ID != k.ID || keys[0].Name != "ci" {
		t.Fatalf("stored keys %+v, %v; want only %s", keys, err, k.ID)
	}
}
