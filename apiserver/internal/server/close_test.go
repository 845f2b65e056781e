package server_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/server"
	"github.com/svc-dev/svc/apiserver/internal/server/servertest"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/shared/testenv/testhttp"
)

// A key's last use is written off the request path; Close waits for that
// write, so once it returns the row says when the key was used (and no
// write can outlive the database).
func TestCloseWaitsForKeyLastUse(t *testing.T) {
	t.Parallel()
	cat, err := catalog.Load(catalog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db := storetest.Postgres(t)
	srv := servertest.New(t, server.Deps{Store: db, Catalog: cat})
	acct := servertest.NewAccount(t, db)
	if resp, body := testhttp.Get(t, srv.URL+"/v1/models", acct.Key); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/models: %d %s", resp.StatusCode, body)
	}
	if err := srv.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	keys, err := db.ListAPIKeys(context.Background(), acct.WorkspaceID)
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys %v: %v", keys, err)
	}
	if keys[0].LastUsedAt == nil {
		t.Fatal("Close returned before the key's last use was recorded")
	}
}
