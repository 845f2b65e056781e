package main

import (
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/admin"
	"github.com/svc-dev/svc/shared/datadir"
)

func TestRunRefusesUnknownCommands(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{nil, {"server"}, {"--help"}} {
		if err := run(context.Background(), args); !errors.Is(err, admin.ErrUsage) {
			t.Errorf("run(%q) = %v, want a usage error", args, err)
		}
	}
}

func TestAdvertiseURL(t *testing.T) {
	t.Parallel()
	loop := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	for _, tc := range []struct {
		name, configured string
		addr             net.Addr
		want             string // "" with wantErr
		wantErr          bool
	}{
		{"configured, trailing slash dropped", "https://api-0.svc.example/", loop, "https://api-0.svc.example", false},
		{"listen address", "", loop, "http://127.0.0.1:8080", false},
		{"not http", "ftp://x", loop, "", true},
		{"no host", "http://", loop, "", true},
		{"not a URL", "::", loop, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := advertiseURL(tc.configured, tc.addr)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("advertiseURL(%q) = %q, %v; want %q (error: %v)", tc.configured, got, err, tc.want, tc.wantErr)
			}
		})
	}
	// Every interface: a routable address of this host (or loopback), and
	// never the unspecified address other replicas could not dial.
	got, err := advertiseURL("", &net.TCPAddr{IP: net.IPv4zero, Port: 9})
	if err != nil || strings.Contains(got, "0.0.0.0") || !strings.HasSuffix(got, ":9") {
		t.Fatalf("advertiseURL on 0.0.0.0:9 = %q, %v", got, err)
	}
}

// The dev secret is made once, private to the user, and read back on the
// next start, so pods of `make run` keep valid tokens across restarts.
func TestDevSecretIsKept(t *testing.T) {
	t.Parallel()
	dir := t.TempDir() + "/data"
	first, err := devSecret(dir)
	if err != nil || len(first) < 20 {
		t.Fatalf("devSecret = %q, %v", first, err)
	}
	fi, err := os.Stat(datadir.RuntimeSecret(dir))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret file: %v, mode %v; want 0600", err, fi.Mode())
	}
	again, err := devSecret(dir)
	if err != nil || again != first {
		t.Fatalf("second devSecret = %q, %v; want the first %q", again, err, first)
	}
}

func TestPodOnlyEnv(t *testing.T) {
	t.Parallel()
	got := podOnlyEnv([]string{"SVC_POD_WEBHOOK_SYNC_TIMEOUT=5s", "SVC_HTTP_ADDR=:8080", "SVC_POD_=x", "PATH=/bin",
		"SVC_POD_A=b=c", "svc_pod_lower=1"})
	if want := []string{"SVC_WEBHOOK_SYNC_TIMEOUT=5s", "SVC_A=b=c"}; !slices.Equal(got, want) {
		t.Fatalf("podOnlyEnv = %q, want %q", got, want)
	}
}
