package pairing

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/apiserver/internal/runtimes"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/runtimetoken"
	"github.com/svc-dev/svc/shared/testenv"
)

func TestEnsurePinnedRelaysToTheHolder(t *testing.T) {
	t.Parallel()
	secret := []byte("s")
	h := NewHub(Options{RuntimeSecret: secret, AdvertiseURL: "http://10.0.0.1:8080/", Log: zaptest.NewLogger(t)})
	p := store.Project{ID: "prj_1"}
	pinned := func(endpoint string) store.RuntimeAssignment {
		return store.RuntimeAssignment{ProjectID: p.ID, Driver: DriverName, Instance: "pair_1", Endpoint: endpoint}
	}
	ep, err := h.EnsurePinned(context.Background(), p, pinned("http://10.0.0.2:8080"))
	if err != nil {
		t.Fatal(err)
	}
	if ep.URL.String() != "http://10.0.0.2:8080/internal/projects/prj_1/relay" || ep.Token != runtimetoken.Mint(secret, p.ID) {
		t.Fatalf("relay endpoint %s token %q", ep.URL, ep.Token)
	}
	if _, ok := ep.Transport.(relayTransport); !ok {
		t.Fatalf("transport %T", ep.Transport)
	}
	for _, endpoint := range []string{
		"",                     // connected nowhere
		"http://10.0.0.1:8080", // this replica, which holds no tunnel: never relayed to itself
		"ftp://10.0.0.2",       // unusable
		"http://%zz",           // unparsable
	} {
		if _, err := h.EnsurePinned(context.Background(), p, pinned(endpoint)); !errors.Is(err, runtimes.ErrOffline) {
			t.Errorf("holder %q: %v, want ErrOffline", endpoint, err)
		}
	}
	// The relay route's driver never relays.
	if _, err := h.Local().Ensure(context.Background(), p); !errors.Is(err, runtimes.ErrOffline) {
		t.Errorf("local: %v", err)
	}
	// Without the runtime secret no token can be minted for the relay.
	nosecret := NewHub(Options{AdvertiseURL: "http://10.0.0.1:8080"})
	var se *runtimes.StartError
	if _, err := nosecret.EnsurePinned(context.Background(), p, pinned("http://10.0.0.2:8080")); !errors.As(err, &se) {
		t.Errorf("no secret: %v", err)
	}
}

func TestRelayTransportDialFailureIsOffline(t *testing.T) {
	t.Parallel()
	port, err := testenv.FreePort() // nothing listens there: a replica that is gone
	testenv.Must(t, err)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/internal/projects/prj_1/relay/healthz", nil)
	_, err = relayTransport{&http.Transport{}}.RoundTrip(req)
	if !errors.Is(err, runtimes.ErrOffline) {
		t.Fatalf("dial failure: %v, want ErrOffline", err)
	}
}
