package storage_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/config"
	"github.com/svc-dev/svc/apiserver/internal/storage"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/testenv/testhttp"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func roundTrip(t *testing.T, st objstore.Store) {
	t.Helper()
	ctx := context.Background()
	key := objstore.RepoKey("prj_open")
	if _, err := st.Put(ctx, key, strings.NewReader("x"), 1, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Head(ctx, key); err != nil {
		t.Fatal(err)
	}
}

func TestFSUnderDataDirWithPresignedURLs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	defer srv.Close()
	cfg := &config.Config{Store: objstore.Config{Backend: "fs"}, DataDir: dir, PublicURL: srv.URL + "/", RuntimeAuthSecret: "s3cret", HTTPAddr: "127.0.0.1:1"}
	o, err := storage.Open(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.FSDir != filepath.Join(dir, "store") || o.Handler == nil {
		t.Fatalf("opened %+v", o)
	}
	mux.Handle(storage.FSBasePath+"/", o.Handler)
	roundTrip(t, o.Store)
	u, err := o.Store.PresignGet(context.Background(), objstore.RepoKey("prj_open"), time.Minute)
	if err != nil || !strings.HasPrefix(u, srv.URL+"/objects/") {
		t.Fatalf("presigned %q %v", u, err)
	}
	resp, b := testhttp.Get(t, u, "")
	if resp.StatusCode != 200 || !bytes.Equal(b, []byte("x")) {
		t.Fatalf("presigned GET: %d %q", resp.StatusCode, b)
	}
	if !bytes.Equal(storage.SigningKey("a"), storage.SigningKey("a")) || bytes.Equal(storage.SigningKey("a"), storage.SigningKey("b")) {
		t.Fatal("signing key not a function of the secret")
	}
}

func TestS3(t *testing.T) {
	t.Parallel()
	env := testenv.MinIO(t)
	cfg := &config.Config{Store: objstore.Config{Backend: "s3", Endpoint: env.Endpoint, Bucket: env.Bucket, AccessKey: env.AccessKey, SecretKey: env.SecretKey}}
	o, err := storage.Open(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.Handler != nil || o.FSDir != "" {
		t.Fatalf("s3 opened %+v", o)
	}
	roundTrip(t, o.Store)
	if _, err := storage.Open(context.Background(), &config.Config{Store: objstore.Config{Backend: "s3"}}, nil); err == nil {
		t.Fatal("s3 without endpoint accepted")
	}
}
