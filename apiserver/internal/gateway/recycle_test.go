package gateway

import (
	"io"
	"net"
	"testing"
)

// A new connection and one given back are both accepted as a serverConn:
// it reads what the client sent (a recycled one's first Read grows the
// stack first), keeps the methods net/http looks for on a TCP connection,
// and unwraps to the TCP connection a next takeover gives back again.
func TestRecycledConn(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newRecyclingListener(ln, 0, 0)
	t.Cleanup(func() { l.Close() })
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	first, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	fresh, ok := first.(*serverConn)
	if !ok || fresh.recycled {
		t.Fatalf("a new connection is accepted as %T (recycled %v), want a new *serverConn", first, ok && fresh.recycled)
	}
	if !l.giveBack(tcpConn(first)) {
		t.Fatal("giveBack refused an open listener's connection")
	}
	again, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	rc, ok := again.(*serverConn)
	if !ok {
		t.Fatalf("a connection given back is accepted as %T, want *serverConn", again)
	}
	if _, ok := again.(io.ReaderFrom); !ok {
		t.Error("the recycled connection lost ReadFrom")
	}
	if _, ok := again.(interface{ CloseWrite() error }); !ok {
		t.Error("the recycled connection lost CloseWrite")
	}
	if tcpConn(again) != fresh.TCPConn || tcpConn(fresh.TCPConn) != fresh.TCPConn {
		t.Errorf("tcpConn(%T) is not the connection given back", again)
	}
	if tcpConn(&net.UnixConn{}) != nil {
		t.Error("tcpConn of a Unix connection is not nil")
	}
	if _, err := client.Write([]byte("GET / HTTP/1.1\r\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	if _, err := io.ReadFull(again, buf); err != nil || string(buf) != "GET / HTTP/1.1\r\n" {
		t.Fatalf("read %q, %v", buf, err)
	}
	if !rc.grown {
		t.Error("the first Read did not grow the stack")
	}
}
