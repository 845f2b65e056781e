package gateway

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/trace"
)

// StreamWriteTimeout bounds one write of a taken-over stream: a client that
// stops reading for that long (its socket buffers full) is treated as gone,
// so it cannot pin the stream's goroutine. Each write has at least this long
// and at most half as long again (connEvents.write).
const StreamWriteTimeout = 30 * time.Second

// A streamed answer to an HTTP/1.1 client is relayed on a connection taken
// over from net/http once the upstream has answered 200: the handler writes
// the status line, the headers and the events already buffered through
// net/http's response (one flushed write), takes the connection over,
// returns, and one fresh goroutine relays the rest of the events as
// hand-written chunks, meters and ends the response with the last chunk.
// Then the connection goes back to net/http through the server's listener
// (recycle.go), so the client's next request reuses it; when it cannot (no
// Streams.Listen, a client that asked to close, a request body not read to
// its end, TLS served by this process) the answer says Connection: close,
// and the connection is closed after the last chunk (so also after a failed
// write, or when bytes of a next request were already read). net/http's connection
// goroutine (its stack is deep after admission), its background reader and
// its connection buffers are released for the stream's life; see
// docs/performance.md. HTTP/2 and HTTP/1.0 clients keep the handler path.

// detached is one taken-over stream: what its goroutine needs after the
// handler returned (the echo context is recycled by then).
type detached struct {
	x      *exchange
	body   io.ReadCloser // the upstream's
	relay  *eventRelay
	cancel context.CancelFunc
	// back takes the client connection after a clean end (nil: close it).
	back  *recyclingListener
	w     *connEvents
	held  *held
	span  trace.Span // the server span, ended here instead of by Observe
	route string
}

// detach answers x's stream on the client's connection taken over from
// net/http and starts its relay; false when the connection cannot be taken
// over (nothing is written then, and the caller streams through the
// handler). cancel ends x.ctx.
//
// Nothing between the upstream's answer and the client's first event waits
// for another goroutine: the status line, the headers and the events that
// came in with the upstream's headers are written through net/http's
// response on the handler's goroutine and flushed as one write (as a
// reverse proxy flushing every write sends them); only then is the
// connection taken over (net/http's background read stopped, a goroutine
// wake-up) and the relay of the rest started on a goroutine of its own.
func (a *API) detach(c echo.Context, x *exchange, resp *http.Response, cancel context.CancelFunc) bool {
	req := c.Request()
	res := c.Response()
	if a.Streams == nil || req.ProtoMajor != 1 || req.ProtoMinor != 1 {
		return false
	}
	if !hijackable(res.Writer) {
		return false
	}
	back := a.Streams.recycler()
	if back != nil && (req.Close || req.TLS != nil || !bodyRead(req)) {
		back = nil
	}
	// Tracked before the connection leaves net/http's hands: at every
	// moment the stream is either a request http.Server.Shutdown waits for
	// or an open stream Streams.Shutdown waits for, so a shutdown never
	// closes the usage recorder under a stream that still has to meter.
	held := a.Streams.add(cancel)
	setSSEHeaders(res.Header(), back == nil)
	res.WriteHeader(http.StatusOK) // the overhead headers (Observe's hook); net/http adds Date and chunking
	r := newRelay(responseEvents{w: res, noFlush: true}, resp.Body, x.codec.stream(x), func() { x.observe(a) })
	r.buffered()
	res.Flush()
	// The first events are on the wire. What follows — the take-over, which
	// stops net/http's background read of the connection (a wake-up of its
	// goroutine and a wait for it), and the relay's start — would keep this
	// CPU from the reader those events just woke, when that reader shares
	// the machine's CPUs (a sidecar or ingress proxy on the same node, a
	// load generator): the thread gives the CPU up once first.
	yieldCPU()
	conn, brw, err := http.NewResponseController(res).Hijack()
	if err != nil {
		// Still net/http's: the rest through the handler's response.
		a.Streams.remove(held)
		defer cancel()
		defer resp.Body.Close()
		r.s.w = responseEvents{w: res}
		_, span := a.Tracer.Start(x.ctx, "stream")
		u := r.run()
		span.End()
		a.meter(x, u, true)
		return true
	}
	a.Streams.attach(held, conn)
	if brw.Reader.Buffered() > 0 {
		back = nil // bytes of a next request: net/http cannot get them back
	}
	if tc := tcpConn(conn); tc != nil {
		conn = tc // net/http's Read wrapper is done with (recycle.go)
	} else {
		back = nil // a test pipe
	}
	brw.Reader, brw.Writer = nil, nil // net/http's buffers are not used
	w := &connEvents{conn: conn}
	r.s.w = w
	d := &detached{x: x, body: resp.Body, relay: r, cancel: cancel, w: w, back: back, held: held,
		span: trace.SpanFromContext(req.Context()), route: c.Path()}
	timingOf(c).detached = true
	go a.relayDetached(d)
	return true
}

// relayDetached relays, meters and ends a taken-over stream, on a goroutine
// of its own.
func (a *API) relayDetached(d *detached) {
	x := d.x
	_, span := a.Tracer.Start(x.ctx, "stream")
	u := d.relay.run()
	span.End()
	d.body.Close()
	a.meter(x, u, true)
	d.w.finish(d.back)
	d.cancel()
	a.Streams.remove(d.held)
	endServerSpan(d.span, http.StatusOK, d.route, x.requestID)
}

// hijackable reports whether w, or a writer it wraps, can be hijacked (as
// http.ResponseController looks for it): checked before anything is
// written, so that a stream that cannot be taken over still has the
// handler path.
func hijackable(w http.ResponseWriter) bool {
	for {
		switch t := w.(type) {
		case http.Hijacker:
			return true
		case interface{ Unwrap() http.ResponseWriter }:
			w = t.Unwrap()
		default:
			return false
		}
	}
}

// bodyRead reports whether the request's body was read to its end (the
// handler decoded it), so nothing of it is left on the connection.
func bodyRead(req *http.Request) bool {
	if req.Body == nil || req.Body == http.NoBody {
		return true
	}
	var one [1]byte
	n, err := req.Body.Read(one[:])
	return n == 0 && err == io.EOF
}

// eventBuffered reports whether the upstream's first event came in with its
// headers: the body's transport holds a whole event (an SSE event ends in a
// blank line) that a read returns at once.
func eventBuffered(body io.Reader) bool {
	b, ok := body.(interface{ Buffered() []byte })
	return ok && bytes.Contains(b.Buffered(), []byte("\n\n"))
}

// connEvents writes a taken-over stream as HTTP/1.1 chunks, one event a
// chunk, each write bounded by StreamWriteTimeout. After a failed write the
// connection is closed and every later write fails.
type connEvents struct {
	conn     net.Conn
	timeout  time.Duration // 0: StreamWriteTimeout
	err      error
	deadline time.Time // the connection's write deadline
}

func (w *connEvents) event(name string, payload []byte) error {
	if w.err != nil {
		return w.err
	}
	out := outBufs.Get().(*[]byte)
	n := len("data: ") + len(payload) + 2
	if name != "" {
		n += len("event: ") + len(name) + 1
	}
	b := strconv.AppendInt((*out)[:0], int64(n), 16)
	b = append(b, '\r', '\n')
	b = appendSSE(b, name, payload)
	*out = append(b, '\r', '\n')
	w.write(*out)
	putOut(out)
	return w.err
}

// finish writes the last chunk (unless the client is gone) and gives the
// connection back to l when it is set and the answer ended cleanly, else
// closes it, our side first (as net/http does, so the client reads the end
// rather than a reset).
func (w *connEvents) finish(l *recyclingListener) {
	w.write([]byte("0\r\n\r\n"))
	if w.err == nil && l != nil && w.conn.SetDeadline(time.Time{}) == nil && l.giveBack(w.conn) {
		return
	}
	if w.err == nil {
		if cw, ok := w.conn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		w.conn.Close()
	}
}

func (w *connEvents) write(b []byte) {
	if w.err != nil {
		return
	}
	timeout := w.timeout
	if timeout <= 0 {
		timeout = StreamWriteTimeout
	}
	// The deadline moves only once it is nearer than timeout, to 1.5 x
	// timeout from now: every write still has at least timeout, and the
	// events of a stream do not each re-arm the connection's timer (a
	// timer moved is a lock of the runtime's timer heap, and a thread woken
	// to watch it when it became the next to fire).
	if now := time.Now(); w.deadline.Sub(now) < timeout {
		w.deadline = now.Add(timeout + timeout/2)
		w.err = w.conn.SetWriteDeadline(w.deadline)
	}
	if w.err == nil {
		_, w.err = w.conn.Write(b)
	}
	if w.err != nil {
		w.conn.Close()
	}
}
