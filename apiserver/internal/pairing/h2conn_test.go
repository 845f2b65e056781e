package pairing

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// The tunnel's client speaks HTTP/2 over a connection it is handed: the
// probe and requests are answered over it, a connection whose streams are
// all busy stays usable, and one the server closed is not.
func TestClientConnOverAHeldConnection(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	entered, release := make(chan struct{}), make(chan struct{})
	srv := &http.Server{Protocols: &protos, HTTP2: &http.HTTP2Config{MaxConcurrentStreams: 1},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				close(entered)
				<-release
			}
			_, _ = io.WriteString(w, r.Proto+" "+r.URL.Path)
		})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc, err := clientConn(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if err := probe(ctx, cc); err != nil {
		t.Fatalf("probe: %v", err)
	}
	if !usable(cc) {
		t.Fatal("a fresh connection is not usable")
	}
	send := func(path string) string {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+tunnelHost+path, nil)
		res, err := cc.RoundTrip(req)
		if err != nil {
			return err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return string(b)
	}
	if got := send("/agent/a"); got != "HTTP/2.0 /agent/a" {
		t.Fatalf("request: %q", got)
	}

	slow := make(chan string, 1)
	go func() { slow <- send("/slow") }()
	<-entered
	if !usable(cc) {
		t.Fatalf("a busy connection (available %d, in flight %d) is not usable", cc.Available(), cc.InFlight())
	}
	close(release)
	if got := <-slow; got != "HTTP/2.0 /slow" {
		t.Fatalf("slow request: %q", got)
	}

	closed := make(chan struct{}, 1)
	cc.SetStateHook(func(cc *http.ClientConn) {
		if cc.Err() != nil {
			select {
			case closed <- struct{}{}:
			default:
			}
		}
	})
	_ = srv.Close()
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("the client never saw the server close the connection")
	}
	if usable(cc) {
		t.Fatal("a closed connection is usable")
	}
}
