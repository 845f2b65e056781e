package upstream

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// h1Server is an upstream that counts the connections it accepted and has
// open, and answers by path: /plain a JSON body, /stream two SSE events, /hold
// one event and then waits for release, /slow no headers until release.
type h1Server struct {
	*httptest.Server
	accepted, open atomic.Int64
	release        chan struct{}
}

func newH1Server(t *testing.T) *h1Server {
	t.Helper()
	s := &h1Server{release: make(chan struct{})}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			s.accepted.Add(1)
			s.open.Add(1)
		case http.StateClosed, http.StateHijacked:
			s.open.Add(-1)
		}
	}
	s.Start()
	t.Cleanup(func() {
		select {
		case <-s.release:
		default:
			close(s.release)
		}
		s.Close()
	})
	return s
}

func (s *h1Server) serve(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	switch r.URL.Path {
	case "/plain":
		_, _ = io.WriteString(w, `{"ok":true}`)
	case "/stream", "/hold":
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: 1\n\n")
		w.(http.Flusher).Flush()
		if r.URL.Path == "/hold" {
			select {
			case <-s.release:
			case <-r.Context().Done():
				return
			}
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	case "/slow":
		select {
		case <-s.release:
		case <-r.Context().Done():
		}
	}
}

// waitFor polls cond until it holds or 10 s have passed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: not %s", what)
		}
		time.Sleep(5 * time.Millisecond) // a poll interval, not a synchronisation
	}
}

func newTestH1(o Options) *h1Transport {
	o.MaxIdleConnsPerHost = max(o.MaxIdleConnsPerHost, 1)
	if o.IdleConnTimeout == 0 {
		o.IdleConnTimeout = time.Hour
	}
	return newH1Transport((&net.Dialer{}).DialContext, o)
}

func post(ctx context.Context, t *testing.T, tr http.RoundTripper, url string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"model":"m"}`))
	if err != nil {
		t.Fatal(err)
	}
	return tr.RoundTrip(req)
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	resp.Body.Close()
	return string(b)
}

// TestH1Reuse: answers read to their end give the connection back, so a
// client's sequence of plain and streamed requests runs on one connection;
// a body closed early closes its connection instead of draining it.
func TestH1Reuse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		paths        []string
		closeEarly   bool // close the last body after its first event
		wantAccepted int64
	}{
		{name: "plain", paths: []string{"/plain", "/plain", "/plain"}, wantAccepted: 1},
		{name: "streams", paths: []string{"/stream", "/plain", "/stream"}, wantAccepted: 1},
		{name: "stream cut short", paths: []string{"/plain", "/hold", "/plain"}, closeEarly: true, wantAccepted: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newH1Server(t)
			tr := newTestH1(Options{})
			for _, p := range tc.paths {
				resp, err := post(context.Background(), t, tr, s.URL+p)
				if err != nil {
					t.Fatalf("%s: %v", p, err)
				}
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%s: status %d", p, resp.StatusCode)
				}
				if p == "/hold" && tc.closeEarly {
					line, err := bufio.NewReader(resp.Body).ReadString('\n')
					if err != nil || line != "data: 1\n" {
						t.Fatalf("first line %q, %v", line, err)
					}
					resp.Body.Close() // must not wait for the held stream
					if _, err := resp.Body.Read(make([]byte, 1)); err == nil {
						t.Fatal("a closed body still reads")
					}
					continue
				}
				body := readAll(t, resp)
				if p == "/stream" && body != "data: 1\n\ndata: [DONE]\n\n" {
					t.Fatalf("stream body %q", body)
				}
				if p == "/plain" && body != `{"ok":true}` {
					t.Fatalf("plain body %q", body)
				}
			}
			if got := s.accepted.Load(); got != tc.wantAccepted {
				t.Fatalf("upstream accepted %d connections, want %d", got, tc.wantAccepted)
			}
		})
	}
}

// TestH1PooledConnectionClosed: a pooled connection the upstream closed is
// not used for the next request (which would fail); a new one is dialled.
func TestH1PooledConnectionClosed(t *testing.T) {
	t.Parallel()
	s := newH1Server(t)
	tr := newTestH1(Options{})
	resp, err := post(context.Background(), t, tr, s.URL+"/plain")
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	tr.mu.Lock()
	pooled := tr.idle[s.Listener.Addr().String()]
	tr.mu.Unlock()
	if len(pooled) != 1 {
		t.Fatalf("%d pooled connections, want 1", len(pooled))
	}
	s.CloseClientConnections()
	waitFor(t, "the upstream's close seen", func() bool { return !alive(pooled[0].nc) })

	resp, err = post(context.Background(), t, tr, s.URL+"/plain")
	if err != nil {
		t.Fatalf("request after the upstream closed the pooled connection: %v", err)
	}
	if body := readAll(t, resp); body != `{"ok":true}` {
		t.Fatalf("body %q", body)
	}
	if got := s.accepted.Load(); got != 2 {
		t.Fatalf("upstream accepted %d connections, want 2", got)
	}
}

// TestH1IdlePool: at most MaxIdleConnsPerHost connections stay pooled after
// a burst of streams, and a pooled connection is closed after
// IdleConnTimeout.
func TestH1IdlePool(t *testing.T) {
	t.Parallel()
	pooled := func(tr *h1Transport) (n int) {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		for _, l := range tr.idle {
			n += len(l)
		}
		return n
	}
	t.Run("bounded", func(t *testing.T) {
		t.Parallel()
		s := newH1Server(t)
		tr := newTestH1(Options{MaxIdleConnsPerHost: 2})
		const streams = 5
		var bodies []io.ReadCloser
		for range streams {
			resp, err := post(context.Background(), t, tr, s.URL+"/hold")
			if err != nil {
				t.Fatal(err)
			}
			bodies = append(bodies, resp.Body)
		}
		if got := s.open.Load(); got != streams {
			t.Fatalf("%d upstream connections open for %d held streams", got, streams)
		}
		close(s.release)
		for _, b := range bodies {
			if _, err := io.Copy(io.Discard, b); err != nil {
				t.Fatal(err)
			}
			b.Close()
		}
		waitFor(t, "down to the bound of 2 idle connections", func() bool { return s.open.Load() == 2 })
		if n := pooled(tr); n != 2 {
			t.Fatalf("%d pooled, want 2", n)
		}
		tr.CloseIdleConnections()
		waitFor(t, "no connection open after CloseIdleConnections", func() bool { return s.open.Load() == 0 })
	})
	t.Run("idle timeout", func(t *testing.T) {
		t.Parallel()
		s := newH1Server(t)
		tr := newTestH1(Options{IdleConnTimeout: 100 * time.Millisecond})
		resp, err := post(context.Background(), t, tr, s.URL+"/stream")
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		waitFor(t, "the idle connection closed after the idle timeout", func() bool { return s.open.Load() == 0 })
		if n := pooled(tr); n != 0 {
			t.Fatalf("%d still pooled after the idle timeout", n)
		}
	})
}

// TestH1Failures: a stalled upstream is a timeout, a refused dial an error,
// and the request's context ends an exchange at any point.
func TestH1Failures(t *testing.T) {
	t.Parallel()
	s := newH1Server(t)
	t.Run("header timeout", func(t *testing.T) {
		t.Parallel()
		tr := newTestH1(Options{HeaderTimeout: 100 * time.Millisecond})
		_, err := post(context.Background(), t, tr, s.URL+"/slow")
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("err %v, want a timeout", err)
		}
		if err := classify(err); !errors.Is(err, ErrTimeout) {
			t.Fatalf("classified %v, want ErrTimeout", err)
		}
	})
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		if _, err := post(context.Background(), t, newTestH1(Options{}), "http://"+addr+"/plain"); err == nil {
			t.Fatal("no error from a closed port")
		}
	})
	t.Run("cancel before headers", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		_, err := post(ctx, t, newTestH1(Options{}), s.URL+"/slow")
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want context.Canceled", err)
		}
	})
	t.Run("cancel mid-stream", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		tr := newTestH1(Options{})
		resp, err := post(ctx, t, tr, s.URL+"/hold")
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(1)
		var rerr error
		go func() {
			defer wg.Done()
			_, rerr = io.Copy(io.Discard, br)
		}()
		cancel()
		wg.Wait()
		if !errors.Is(rerr, context.Canceled) {
			t.Fatalf("read after cancel: %v, want context.Canceled", rerr)
		}
		resp.Body.Close()
		tr.mu.Lock()
		defer tr.mu.Unlock()
		if len(tr.idle) != 0 {
			t.Fatal("a cancelled exchange's connection was pooled")
		}
	})
}

// TestTransportsRoute: plain http goes through h1, https through net/http.
func TestTransportsRoute(t *testing.T) {
	t.Parallel()
	plain := newH1Server(t)
	tls := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Proto)
	}))
	t.Cleanup(tls.Close)
	c := New(Options{})
	tr := c.rt
	tr.std.TLSClientConfig = tls.Client().Transport.(*http.Transport).TLSClientConfig
	resp, err := post(context.Background(), t, tr, plain.URL+"/plain")
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	tr.h1.mu.Lock()
	n := len(tr.h1.idle)
	tr.h1.mu.Unlock()
	if n != 1 {
		t.Fatal("a plain-http request did not go through h1")
	}
	resp, err = post(context.Background(), t, tr, tls.URL+"/")
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "HTTP/1.1" && got != "HTTP/2.0" {
		t.Fatalf("https answer %q", got)
	}
}

// TestH1Buffered: the bytes that came in with the headers are what Buffered
// shows, and a read returns them.
func TestH1Buffered(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	const event = "data: 1\n\n"
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		// The answer in one write, before the request is read: it is all
		// in the client's socket when it parses the headers.
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n9\r\n"+event+"\r\n")
		_, _ = io.Copy(io.Discard, c)
	}()
	resp, err := post(context.Background(), t, newTestH1(Options{}), "http://"+l.Addr().String()+"/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, ok := resp.Body.(interface{ Buffered() []byte })
	if !ok {
		t.Fatal("the body has no Buffered")
	}
	if got := string(b.Buffered()); got != "9\r\n"+event+"\r\n" {
		t.Fatalf("Buffered %q", got)
	}
	p := make([]byte, 64)
	n, err := resp.Body.Read(p)
	if err != nil || string(p[:n]) != event {
		t.Fatalf("read %q, %v; want the buffered event", p[:n], err)
	}
}
