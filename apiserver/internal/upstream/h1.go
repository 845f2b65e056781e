package upstream

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// h1Transport sends requests to a plain-http upstream (a self-hosted
// OpenAI-compatible server: vLLM, Ollama, a LiteLLM in front of them) over
// HTTP/1.1 on the caller's own goroutine.
//
// net/http's Transport keeps a read loop and a write loop goroutine per
// connection and hands every request and response between them and the
// caller over channels: two goroutines and their stacks for each open stream,
// and two goroutine wake-ups on the way to a stream's first byte (the aim:
// ≤ 2 goroutines per open stream; the relay is the one left). This transport
// writes the request with net/http's own Request.Write, parses the answer
// with http.ReadResponse, and hands the body to the caller; nothing runs
// between exchanges. What net/http's loops also do is done here without a
// goroutine:
//
//   - an idle connection the upstream closed is noticed when it is taken
//     from the pool (one non-blocking read, alive), not by a parked reader;
//   - an idle connection is closed after IdleConnTimeout by a runtime timer,
//     and at most MaxIdleConnsPerHost are kept per host (LIFO, so the
//     warmest is reused and the surplus ages out);
//   - the request's context closes the connection when it ends
//     (context.AfterFunc), which unblocks a read or write in progress;
//   - the header timeout is a read deadline lifted once the headers are in.
//
// HTTPS upstreams (the providers, which negotiate HTTP/2) and requests that
// go through an HTTP proxy from the environment stay on net/http's Transport.
type h1Transport struct {
	dial          func(ctx context.Context, network, addr string) (net.Conn, error)
	headerTimeout time.Duration
	maxIdle       int
	idleTimeout   time.Duration

	mu   sync.Mutex
	idle map[string][]*h1Conn // by host:port, most recently used last
}

// h1Conn is one connection of an h1Transport.
type h1Conn struct {
	t    *h1Transport
	key  string
	nc   net.Conn
	br   *bufio.Reader
	bw   *bufio.Writer
	idle *time.Timer // closes the connection while it is pooled
}

func newH1Transport(dial func(context.Context, string, string) (net.Conn, error), o Options) *h1Transport {
	return &h1Transport{dial: dial, headerTimeout: o.HeaderTimeout, maxIdle: o.MaxIdleConnsPerHost,
		idleTimeout: o.IdleConnTimeout, idle: map[string][]*h1Conn{}}
}

// RoundTrip implements http.RoundTripper for http:// URLs.
func (t *h1Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	c, err := t.conn(ctx, hostPort(req.URL.Host, "80"))
	if err != nil {
		closeBody(req)
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { c.nc.Close() })
	resp, err := c.exchange(req, t.headerTimeout)
	if err != nil {
		stop()
		c.nc.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	resp.Body = &h1Body{c: c, body: resp.Body, ctx: ctx, stop: stop, keep: !resp.Close && !req.Close}
	return resp, nil
}

// exchange writes req and reads the answer's headers. 1xx answers are
// skipped, as net/http does.
func (c *h1Conn) exchange(req *http.Request, headerTimeout time.Duration) (*http.Response, error) {
	if err := req.Write(c.bw); err != nil {
		return nil, err
	}
	if err := c.bw.Flush(); err != nil {
		return nil, err
	}
	if headerTimeout > 0 {
		_ = c.nc.SetReadDeadline(time.Now().Add(headerTimeout))
	}
	written(req.Context()) // while the upstream works on the answer
	for {
		resp, err := http.ReadResponse(c.br, req)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return nil, errHeaderTimeout
			}
			return nil, err
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			continue
		}
		_ = c.nc.SetReadDeadline(time.Time{})
		return resp, nil
	}
}

// errHeaderTimeout is net/http's ResponseHeaderTimeout error, in its words.
var errHeaderTimeout = timeoutError("net/http: timeout awaiting response headers")

type timeoutError string

func (e timeoutError) Error() string { return string(e) }
func (e timeoutError) Timeout() bool { return true }
func (timeoutError) Temporary() bool { return true }

// conn takes a live idle connection to addr, or dials one.
func (t *h1Transport) conn(ctx context.Context, addr string) (*h1Conn, error) {
	for {
		c := t.takeIdle(addr)
		if c == nil {
			break
		}
		if alive(c.nc) && c.br.Buffered() == 0 {
			return c, nil
		}
		c.nc.Close()
	}
	nc, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &h1Conn{t: t, key: addr, nc: nc,
		br: bufio.NewReaderSize(nc, upstreamReadBuffer), bw: bufio.NewWriterSize(nc, upstreamWriteBuffer)}, nil
}

// takeIdle pops addr's most recently pooled connection; nil when none.
func (t *h1Transport) takeIdle(addr string) *h1Conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	for list := t.idle[addr]; len(list) > 0; list = t.idle[addr] {
		c := list[len(list)-1]
		list[len(list)-1] = nil
		t.idle[addr] = list[:len(list)-1]
		if c.idle.Stop() {
			return c
		}
		// Its idle timer fired and is waiting for t.mu to close it.
	}
	delete(t.idle, addr)
	return nil
}

// put pools c for the next request to its host, or closes it when the host
// has maxIdle already.
func (t *h1Transport) put(c *h1Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	list := t.idle[c.key]
	if len(list) >= t.maxIdle {
		c.nc.Close()
		return
	}
	if c.idle == nil {
		c.idle = time.AfterFunc(t.idleTimeout, func() { t.expire(c) })
	} else {
		c.idle.Reset(t.idleTimeout)
	}
	t.idle[c.key] = append(list, c)
}

// expire closes c when its idle timeout passed in the pool.
func (t *h1Transport) expire(c *h1Conn) {
	t.mu.Lock()
	list := t.idle[c.key]
	for i, o := range list {
		if o == c {
			t.idle[c.key] = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(t.idle[c.key]) == 0 {
		delete(t.idle, c.key)
	}
	t.mu.Unlock()
	c.nc.Close()
}

// CloseIdleConnections closes every pooled connection.
func (t *h1Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = map[string][]*h1Conn{}
	t.mu.Unlock()
	for _, list := range idle {
		for _, c := range list {
			if c.idle.Stop() {
				c.nc.Close()
			}
		}
	}
}

// h1Body is an answer's body. Read to its end, it gives the connection back
// to the pool; closed before that, it closes the connection (a stream cut
// short must not be drained).
type h1Body struct {
	c    *h1Conn
	body io.ReadCloser // http.ReadResponse's framing (Content-Length or chunked)
	ctx  context.Context
	stop func() bool // unregisters the context's close
	keep bool        // the connection may carry another request
	// state is bodyOpen, then bodyEOF (read to its end) or bodyClosed.
	state atomic.Int32
}

const (
	bodyOpen int32 = iota
	bodyEOF
	bodyClosed
)

var errReadOnClosedBody = errors.New("http: read on closed response body")

func (b *h1Body) Read(p []byte) (int, error) {
	switch b.state.Load() {
	case bodyEOF:
		return 0, io.EOF
	case bodyClosed:
		return 0, errReadOnClosedBody
	}
	n, err := b.body.Read(p)
	switch {
	case err == io.EOF:
		b.finish(bodyEOF, b.keep)
	case err != nil:
		if b.ctx.Err() != nil {
			err = b.ctx.Err()
		}
		b.finish(bodyClosed, false)
	}
	return n, err
}

// Buffered is what the connection read past the headers and the body has
// not returned yet, in its wire framing: the gateway's takeover sends a
// stream's headers together with its first event when the event came in
// with them.
func (b *h1Body) Buffered() []byte {
	if b.state.Load() != bodyOpen {
		return nil
	}
	p, _ := b.c.br.Peek(b.c.br.Buffered())
	return p
}

// Close ends the exchange; the connection is reused only when the body was
// read to its end.
func (b *h1Body) Close() error {
	b.finish(bodyClosed, false)
	return nil
}

// finish moves an open body to state and gives its connection back (reuse)
// or closes it.
func (b *h1Body) finish(state int32, reuse bool) {
	if !b.state.CompareAndSwap(bodyOpen, state) {
		return
	}
	// stop is false once the context closed the connection.
	if b.stop() && reuse {
		b.c.t.put(b.c)
		return
	}
	b.c.nc.Close()
}

// hostPort is host with port def when it names none.
func hostPort(host, def string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	return net.JoinHostPort(host, def)
}

// closeBody closes a request's body that was not sent, as a RoundTripper
// must.
func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}
