package server_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/server"
	"github.com/svc-dev/svc/apiserver/internal/server/servertest"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
)

// A kept-alive connection with no next request is closed by the server
// after the idle timeout: the client reads EOF, not before the timeout.
func TestIdleKeepAliveConnectionClosed(t *testing.T) {
	t.Parallel()
	const idle = 500 * time.Millisecond
	srv := servertest.New(t, server.Deps{Store: storetest.SQLite(t), Timeouts: server.Timeouts{Idle: idle}})
	if got := srv.HTTPServer(); got.IdleTimeout != idle || got.ReadHeaderTimeout != server.DefaultTimeouts.ReadHeader || got.WriteTimeout != 0 {
		t.Fatalf("http.Server timeouts: idle %v, read header %v, write %v", got.IdleTimeout, got.ReadHeaderTimeout, got.WriteTimeout)
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	for range 2 { // the connection is kept alive between requests
		if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("status %d, close %v: %v", resp.StatusCode, resp.Close, err)
		}
	}
	idleFrom := time.Now()
	// A safety bound only: the read ends with the server's close.
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	n, err := br.Read(make([]byte, 1))
	waited := time.Since(idleFrom)
	if n != 0 || err != io.EOF {
		t.Fatalf("read %d bytes, %v; want EOF from the server's close", n, err)
	}
	if waited < idle/2 { // the client starts its clock after the server started the idle one
		t.Fatalf("closed after %v, before the idle timeout %v", waited, idle)
	}
}
