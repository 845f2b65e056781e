package localproc_test

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/svc-dev/svc/shared/localproc"
)

func TestFreePortCanBeListenedOn(t *testing.T) {
	t.Parallel()
	port, err := localproc.FreePort("127.0.0.1")
	if err != nil || port <= 0 {
		t.Fatalf("port %d, err %v", port, err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("listen on the free port: %v", err)
	}
	ln.Close()
}

func TestTail(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte(strings.Repeat("x", 100)+"the end\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		n    int64
		want string
	}{
		{path, 8, "the end"},
		{path, 1 << 20, strings.Repeat("x", 100) + "the end"},
		{filepath.Join(t.TempDir(), "missing"), 8, ""},
	} {
		if got := localproc.Tail(tc.path, tc.n); got != tc.want {
			t.Errorf("Tail(%s, %d) = %q, want %q", tc.path, tc.n, got, tc.want)
		}
	}
}
