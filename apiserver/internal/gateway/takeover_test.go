package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
)

// TestConnEventsIsHTTP: a taken-over stream, read back by net/http's own
// response parser after a chunked answer's head, is a valid chunked
// HTTP/1.1 answer that closes the connection, with the same events the
// handler path sends — whether the relay writes its first event itself or
// after it went out through the handler's response.
func TestConnEventsIsHTTP(t *testing.T) {
	t.Parallel()
	for _, firstBefore := range []bool{false, true} {
		t.Run(fmt.Sprintf("first event before the takeover %v", firstBefore), func(t *testing.T) {
			t.Parallel()
			server, client := net.Pipe()
			go func() {
				_, _ = io.WriteString(server, "HTTP/1.1 200 OK\r\nX-Request-Id: req-1\r\nContent-Type: text/event-stream\r\n"+
					"Connection: close\r\nTransfer-Encoding: chunked\r\n\r\n")
				first := &connEvents{conn: server}
				r := newRelay(first, &allBuffered{s: upstreamSSE}, newChatStream("svc-2-0", true), func() {})
				if firstBefore {
					if r.buffered(); r.s.written != 1 {
						t.Errorf("%d events relayed before the takeover, want the first alone", r.s.written)
					}
				}
				w := &connEvents{conn: server}
				r.s.w = w
				r.run()
				w.finish(nil)
			}()
			resp, err := http.ReadResponse(bufio.NewReader(client), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("reading the chunked body: %v", err)
			}
			want, _ := relay(t, upstreamSSE, true)
			if resp.StatusCode != 200 || !resp.Close || len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" ||
				resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("X-Request-Id") != "req-1" {
				t.Fatalf("status %d, close %v, transfer-encoding %v, headers %v", resp.StatusCode, resp.Close, resp.TransferEncoding, resp.Header)
			}
			if string(body) != want {
				t.Fatalf("body differs from the handler path's\n got: %q\nwant: %q", body, want)
			}
			if _, err := client.Read(make([]byte, 1)); err != io.EOF {
				t.Fatalf("connection not closed after the last chunk: %v", err)
			}
		})
	}
}

// TestEventBuffered: headers wait for the first event only when a whole
// event is already in the upstream body's buffer.
func TestEventBuffered(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body io.Reader
		want bool
	}{
		{strings.NewReader("data: 1\n\n"), false}, // no Buffered: net/http's bodies
		{bufferedBody("9\r\ndata: 1\n\n\r\n"), true},
		{bufferedBody("9\r\ndata: 1"), false}, // half an event: it may take its time
		{bufferedBody(""), false},
	} {
		if got := eventBuffered(tc.body); got != tc.want {
			t.Errorf("eventBuffered(%T %v) = %v, want %v", tc.body, tc.body, got, tc.want)
		}
	}
}

type bufferedBody string

func (b bufferedBody) Read([]byte) (int, error) { return 0, io.EOF }
func (b bufferedBody) Buffered() []byte         { return []byte(b) }

// TestConnEventsStalledClient: a client that stops reading fails the write
// after the write timeout; the relay then keeps reading the upstream to the
// end, so the usage is still returned.
func TestConnEventsStalledClient(t *testing.T) {
	t.Parallel()
	server, client := net.Pipe() // unbuffered: a write waits for a read
	defer client.Close()
	w := &connEvents{conn: server, timeout: 50 * time.Millisecond}
	u := relayEvents(w, strings.NewReader(upstreamSSE), "svc-2-0", false, func() {})
	if !errors.Is(w.err, os.ErrDeadlineExceeded) {
		t.Fatalf("write error %v, want the deadline", w.err)
	}
	if u == nil || u.PromptTokens != 7 || u.CompletionTokens != 3 {
		t.Fatalf("usage after the client stalled: %+v", u)
	}
	if _, err := server.Write([]byte("x")); err == nil {
		t.Fatal("connection still open after a failed write")
	}
}

// TestStreamsShutdown: Shutdown returns once the open streams end; at its
// deadline it cancels and closes the ones still open and waits for them to
// end; a stream opening after that is cut at once.
func TestStreamsShutdown(t *testing.T) {
	t.Parallel()
	var s Streams
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("nothing open: %v", err)
	}

	// Drained: the stream ends while Shutdown waits.
	c1, p1 := net.Pipe()
	defer p1.Close()
	ctx1, cancel1 := context.WithCancel(context.Background())
	h1 := s.add(cancel1)
	s.attach(h1, c1)
	done := make(chan error)
	go func() { done <- s.Shutdown(context.Background()) }()
	s.remove(h1)
	if err := <-done; err != nil {
		t.Fatalf("drained: %v", err)
	}
	if ctx1.Err() != nil {
		t.Fatal("a drained stream was cancelled")
	}

	// Cut: the deadline passes with two streams open, one not yet taken
	// over (its handler between add and attach); each relay sees the
	// cancel and ends, and the late one's connection is closed as it is
	// attached.
	c2, p2 := net.Pipe()
	ctx2, cancel2 := context.WithCancel(context.Background())
	h2 := s.add(cancel2)
	s.attach(h2, c2)
	go func() {
		<-ctx2.Done()
		s.remove(h2)
	}()
	ctx4, cancel4 := context.WithCancel(context.Background())
	h4 := s.add(cancel4)
	c4, p4 := net.Pipe()
	go func() {
		<-ctx4.Done()
		s.attach(h4, c4) // taken over after the cut
		s.remove(h4)
	}()
	dctx, dcancel := context.WithCancel(context.Background())
	dcancel()
	if err := s.Shutdown(dctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cut: %v", err)
	}
	if _, err := p2.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("client connection of a cut stream: %v", err)
	}
	if _, err := p4.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("client connection of a stream taken over after the cut: %v", err)
	}
	if s.Open() != 0 {
		t.Fatalf("%d streams still open", s.Open())
	}

	// After the cut, a new stream is cut at once.
	c3, p3 := net.Pipe()
	defer p3.Close()
	ctx3, cancel3 := context.WithCancel(context.Background())
	h3 := s.add(cancel3)
	s.attach(h3, c3)
	s.remove(h3)
	if ctx3.Err() == nil {
		t.Fatal("a stream opened after the cut was not cancelled")
	}
}

// TestDetachOnlyHTTP11: HTTP/1.0 and HTTP/2 requests are not taken over.
func TestDetachOnlyHTTP11(t *testing.T) {
	t.Parallel()
	a := &API{Streams: &Streams{}}
	for _, proto := range []struct{ major, minor int }{{1, 0}, {2, 0}} {
		req := httptest.NewRequest("POST", "/", nil)
		req.ProtoMajor, req.ProtoMinor = proto.major, proto.minor
		c := echo.New().NewContext(req, httptest.NewRecorder())
		if a.detach(c, &exchange{}, &http.Response{Body: http.NoBody}, func() {}) {
			t.Fatalf("HTTP/%d.%d taken over", proto.major, proto.minor)
		}
	}
}

// TestDetachNeedsHijack: an HTTP/1.1 request whose response cannot be
// hijacked is not taken over, and nothing is written before detach says so
// (the handler path still writes the whole answer); a writer that wraps a
// hijackable one (Unwrap) can be.
func TestDetachNeedsHijack(t *testing.T) {
	t.Parallel()
	a := &API{Streams: &Streams{}}
	rec := httptest.NewRecorder()
	c := echo.New().NewContext(httptest.NewRequest("POST", "/", nil), rec)
	if a.detach(c, &exchange{}, &http.Response{Body: http.NoBody}, func() {}) {
		t.Fatal("taken over without a hijackable writer")
	}
	if c.Response().Committed || rec.Flushed || rec.Body.Len() > 0 || a.Streams.Open() != 0 {
		t.Fatalf("written before giving up: committed %v, flushed %v, body %q, open streams %d",
			c.Response().Committed, rec.Flushed, rec.Body, a.Streams.Open())
	}
	if hijackable(rec) || !hijackable(unwrapper{hijacker{rec}}) {
		t.Fatal("hijackable does not follow Unwrap to a Hijacker")
	}
}

type hijacker struct{ http.ResponseWriter }

func (hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) { return nil, nil, errors.New("unused") }

type unwrapper struct{ w http.ResponseWriter }

func (u unwrapper) Header() http.Header         { return u.w.Header() }
func (u unwrapper) Write(b []byte) (int, error) { return u.w.Write(b) }
func (u unwrapper) WriteHeader(code int)        { u.w.WriteHeader(code) }
func (u unwrapper) Unwrap() http.ResponseWriter { return u.w }

// allBuffered is an upstream body whose every byte is in its buffer.
type allBuffered struct {
	s   string
	off int
}

func (b *allBuffered) Read(p []byte) (int, error) {
	if b.off >= len(b.s) {
		return 0, io.EOF
	}
	n := copy(p, b.s[b.off:])
	b.off += n
	return n, nil
}

func (b *allBuffered) Buffered() []byte { return []byte(b.s[b.off:]) }

// deadlineConn counts the write deadlines set on a connection.
type deadlineConn struct {
	net.Conn
	set []time.Time
}

func (c *deadlineConn) SetWriteDeadline(t time.Time) error {
	c.set = append(c.set, t)
	return c.Conn.SetWriteDeadline(t)
}

// TestConnEventsDeadlineMovesRarely: a stream's events share one write
// deadline while it is at least the timeout away; one nearer than that is
// moved before the next write, so every write has the timeout.
func TestConnEventsDeadlineMovesRarely(t *testing.T) {
	t.Parallel()
	server, client := net.Pipe()
	defer client.Close()
	go func() { _, _ = io.Copy(io.Discard, client) }()
	c := &deadlineConn{Conn: server}
	w := &connEvents{conn: c, timeout: time.Minute}
	for range 20 {
		before := time.Now()
		if err := w.event("", []byte(`{"choices":[]}`)); err != nil {
			t.Fatal(err)
		}
		if left := w.deadline.Sub(before); left < time.Minute {
			t.Fatalf("a write had %v, want at least the timeout", left)
		}
	}
	if len(c.set) != 1 {
		t.Fatalf("%d write deadlines set for 20 events, want 1", len(c.set))
	}
	w.deadline = time.Now().Add(30 * time.Second) // nearer than the timeout
	if err := w.event("", []byte(`{"choices":[]}`)); err != nil {
		t.Fatal(err)
	}
	if len(c.set) != 2 || time.Until(c.set[1]) < time.Minute {
		t.Fatalf("deadlines %v, want a second one at least the timeout away", c.set)
	}
	server.Close()
}
