package metal

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/runtimes"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/runtimetoken"
	"github.com/svc-dev/svc/shared/wire"
)

// The driver sends the project's own runtime token to the host and maps
// every failure to a retryable start error (spec 7.2 agent_start_failed).
// The real host is exercised end to end in apiserver/e2e (metal_test.go).
func TestEnsure(t *testing.T) {
	t.Parallel()
	secret := []byte("s3cret")
	var got wire.MetalStartRequest
	host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer host-token" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":{"code":"unauthorized","message":"no"}}`))
			return
		}
		switch r.URL.Path {
		case "/v1/projects/prj_ok":
			_ = json.NewDecoder(r.Body).Decode(&got)
			_ = json.NewEncoder(w).Encode(wire.MetalProject{ProjectID: "prj_ok", State: "running", URL: "http://127.0.0.1:4242"})
		case "/v1/projects/prj_nourl":
			_ = json.NewEncoder(w).Encode(wire.MetalProject{ProjectID: "prj_nourl", State: "failed"})
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":{"code":"agent_start_failed","message":"boot failed"}}`))
		}
	}))
	defer host.Close()
	d, err := New(Options{HostURL: host.URL, HostToken: "host-token", RuntimeSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := d.Ensure(context.Background(), store.Project{ID: "prj_ok"})
	if err != nil || ep.URL.String() != "http://127.0.0.1:4242" || ep.Token != runtimetoken.Mint(secret, "prj_ok") {
		t.Fatalf("ensure: %+v %v", ep, err)
	}
	if got.RuntimeToken != ep.Token || got.CloudSyncMode != "git_only" {
		t.Fatalf("host got %+v", got)
	}
	for _, id := range []string{"prj_nourl", "prj_fail"} {
		_, err := d.Ensure(context.Background(), store.Project{ID: id})
		var se *runtimes.StartError
		if !errors.As(err, &se) || se.RetryAfter <= 0 {
			t.Fatalf("%s: %v, want a StartError", id, err)
		}
	}
	bad, _ := New(Options{HostURL: host.URL, HostToken: "wrong", RuntimeSecret: secret})
	if _, err := bad.Ensure(context.Background(), store.Project{ID: "prj_ok"}); err == nil {
		t.Fatal("a wrong host token was accepted")
	}
	if _, err := New(Options{HostURL: host.URL}); err == nil {
		t.Fatal("no host token: New succeeded")
	}
}
