package server_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/server"
	"github.com/svc-dev/svc/apiserver/internal/server/servertest"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/shared/testenv/fakeupstream"
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

// A connection that carried a stream (taken over from net/http, then given
// back) idles as any kept-alive connection: a next request sent after the
// read-header timeout but within the idle timeout is answered on it, and
// the server closes it after the idle timeout, not before.
func TestStreamedConnectionIdlesAsKeptAlive(t *testing.T) {
	t.Parallel()
	const header, idle = 200 * time.Millisecond, 2 * time.Second
	g := newGatewayWith(t, noTracer, func(d *server.Deps) { d.Timeouts = server.Timeouts{ReadHeader: header, Idle: idle} })
	g.up.Script(func(fakeupstream.Request) fakeupstream.Reply {
		return fakeupstream.Reply{Text: "one two", PromptTokens: 5, CompletionTokens: 2}
	})
	conn, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	stream := func(what string) {
		t.Helper()
		body := `{"model":"svc-2-0","stream":true,"messages":[{"role":"user","content":"hi"}]}`
		if _, err := fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
			"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", g.key, len(body), body); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK || resp.Close || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
			t.Fatalf("%s: status %d, close %v, body %q: %v", what, resp.StatusCode, resp.Close, b, err)
		}
	}
	stream("the first stream")
	// Idle for longer than a request's headers may take: the idle period
	// is what is tested, not a synchronisation.
	time.Sleep(3 * header)
	stream(fmt.Sprintf("the next stream, %v after the first on its connection", 3*header))
	idleFrom := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second)) // a safety bound: the server's close ends the read
	n, err := br.Read(make([]byte, 1))
	if waited := time.Since(idleFrom); n != 0 || err != io.EOF || waited < idle/2 {
		t.Fatalf("read %d bytes, %v after %v; want EOF from the server's close after the idle timeout %v", n, err, waited, idle)
	}
}

// A client that starts a request's headers and never finishes them is cut
// after the read-header timeout, not the idle timeout: on a new connection
// and on a kept-alive one alike.
func TestSlowHeadersCut(t *testing.T) {
	t.Parallel()
	const header, idle = 300 * time.Millisecond, 20 * time.Second
	srv := servertest.New(t, server.Deps{Store: storetest.SQLite(t), Timeouts: server.Timeouts{ReadHeader: header, Idle: idle}})
	for _, keptAlive := range []bool{false, true} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		br := bufio.NewReader(conn)
		if keptAlive {
			if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %v", resp.StatusCode, err)
			}
		}
		from := time.Now()
		if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n"); err != nil { // no blank line
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second)) // a safety bound: the server's close ends the read
		n, err := br.Read(make([]byte, 1))
		if waited := time.Since(from); n != 0 || err != io.EOF || waited < header/2 || waited >= idle/2 {
			t.Fatalf("kept alive %v: read %d bytes, %v after %v; want EOF after the read-header timeout %v", keptAlive, n, err, waited, header)
		}
	}
}
