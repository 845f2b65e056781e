package gateway

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// A stream taken over from net/http (takeover.go) used to answer
// "Connection: close", so a keep-alive client — every SDK — dialled a new
// connection for its next request: most of the time to first byte the
// takeover added. Now a stream that ended cleanly gives its
// connection back to net/http as if it had just been accepted, and the
// client's next request arrives on it as on any kept-alive connection.
// Streams.Listen wraps the server's listener for that; without it (or
// when the connection cannot be handed back) the stream closes the
// connection as before.

// recycleBacklog bounds the connections waiting to be accepted again; past
// it a finished stream closes its connection.
const recycleBacklog = 256

// recyclingListener is a net.Listener whose Accept returns the connections
// of the real listener and those given back by finished streams.
type recyclingListener struct {
	net.Listener
	accepted chan acceptResult // the real listener's, from acceptLoop
	done     chan struct{}     // closed by Close
	// idle is how long a connection given back waits for the client's next
	// request (the server's IdleTimeout; 0: no bound).
	idle time.Duration

	mu     sync.Mutex
	closed bool
	back   chan net.Conn // given back, not yet accepted (buffered)
}

type acceptResult struct {
	conn net.Conn
	err  error
}

func newRecyclingListener(inner net.Listener, idle time.Duration) *recyclingListener {
	l := &recyclingListener{Listener: inner, accepted: make(chan acceptResult), done: make(chan struct{}),
		back: make(chan net.Conn, recycleBacklog), idle: idle}
	go l.acceptLoop()
	return l
}

// acceptLoop runs the real listener's Accept and hands each result over
// (one goroutine per listener), until the listener fails for good.
func (l *recyclingListener) acceptLoop() {
	for {
		c, err := l.Listener.Accept()
		select {
		case l.accepted <- acceptResult{c, err}:
		case <-l.done:
			if c != nil {
				c.Close()
			}
			return
		}
		if err != nil {
			if ne, ok := err.(interface{ Temporary() bool }); !ok || !ne.Temporary() {
				return
			}
		}
	}
}

// Accept returns the next connection: a new one or one given back.
func (l *recyclingListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.back:
		return c, nil
	default:
	}
	select {
	case c := <-l.back:
		return c, nil
	case r := <-l.accepted:
		return r.conn, r.err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// giveBack queues c to be accepted again; false (the caller closes c) once
// the listener is closed or the backlog is full.
func (l *recyclingListener) giveBack(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	select {
	case l.back <- recycled(c, l.idle):
		return true
	default:
		return false
	}
}

// Close closes the real listener and the connections still waiting to be
// accepted again.
func (l *recyclingListener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.done)
	l.mu.Unlock()
	err := l.Listener.Close()
	for {
		select {
		case c := <-l.back:
			c.Close()
		default:
			return err
		}
	}
}

// Listen wraps the server's listener so that taken-over streams give their
// client connection back to it when they end cleanly (keep-alive). Serve
// the returned listener instead of ln. A connection given back waits up to
// s.IdleTimeout for the client's next request, as net/http's kept-alive
// connections do.
func (s *Streams) Listen(ln net.Listener) net.Listener {
	l := newRecyclingListener(ln, s.IdleTimeout)
	s.mu.Lock()
	s.listener = l
	s.mu.Unlock()
	return l
}

// recycler is what a stream about to be taken over may hand its connection
// back to: nil without Listen, or past the shutdown deadline.
func (s *Streams) recycler() *recyclingListener {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cut {
		return nil
	}
	return s.listener
}

// net/http serves a connection given back on a fresh goroutine, whose
// starting stack grows on the next request's first deep call (the key
// lookup): stack copies on the way to the first token, several times
// dearer after an idle gap (docs/performance.md, "Where a stream's auth
// goes"). A recycledConn grows that goroutine's stack on its first Read
// instead, which net/http makes while it waits for the client's next
// request. The garbage collector shrinks the stack again if the
// connection stays idle through a cycle, so idle connections do not keep it.
//
// net/http takes a connection given back for a new one, whose first
// request's headers are due within ReadHeaderTimeout of its acceptance; on
// a kept-alive connection it waits up to IdleTimeout for the next request's
// first bytes and only then starts the header timeout. A recycledConn keeps
// the kept-alive rule: until the next request's first bytes arrive, a read
// deadline net/http sets is held back and the connection waits until its
// idle deadline; the first bytes start the header deadline, as long as
// net/http asked for.
type recycledConn struct {
	*net.TCPConn // ReadFrom, CloseWrite and the rest, as net/http uses them
	grown        bool
	// waiting: no byte of the next request has been read yet.
	waiting   atomic.Bool
	idleUntil time.Time     // the idle deadline (zero: none)
	header    time.Duration // the header timeout net/http asked for while waiting (0: none)
}

// recycled wraps a connection given back for net/http's next accept; it
// waits up to idle (0: no bound) for the client's next request.
func recycled(c net.Conn, idle time.Duration) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc := &recycledConn{TCPConn: tc}
	if idle > 0 {
		rc.idleUntil = time.Now().Add(idle)
	}
	rc.waiting.Store(true)
	return rc
}

// tcpConn is the TCP connection under c (nil: not TCP), so that a stream
// on a connection accepted again can be taken over and given back again.
func tcpConn(c net.Conn) *net.TCPConn {
	switch c := c.(type) {
	case *net.TCPConn:
		return c
	case *recycledConn:
		return c.TCPConn
	}
	return nil
}

func (c *recycledConn) Read(p []byte) (int, error) {
	if !c.grown {
		c.grown = true
		growStack()
	}
	if !c.waiting.Load() {
		return c.TCPConn.Read(p)
	}
	n, err := c.TCPConn.Read(p)
	if n > 0 {
		// The next request has begun: its headers are due from now.
		c.waiting.Store(false)
		var until time.Time
		if c.header > 0 {
			until = time.Now().Add(c.header)
		}
		if derr := c.TCPConn.SetReadDeadline(until); err == nil {
			err = derr
		}
	}
	return n, err
}

// SetReadDeadline holds a deadline set while the connection waits for the
// next request's first bytes back: the wait is bounded by the idle
// deadline, and the deadline's distance from now becomes the header
// timeout started by those bytes (Read).
func (c *recycledConn) SetReadDeadline(t time.Time) error {
	if !c.waiting.Load() {
		return c.TCPConn.SetReadDeadline(t)
	}
	wait := time.Until(t)
	if !t.IsZero() && wait <= 0 {
		return c.TCPConn.SetReadDeadline(t) // a deadline passed: a read to abort now
	}
	c.header = 0
	if !t.IsZero() {
		c.header = wait
	}
	return c.TCPConn.SetReadDeadline(c.idleUntil)
}

// SetDeadline sets the write deadline as it is and the read deadline as
// SetReadDeadline does.
func (c *recycledConn) SetDeadline(t time.Time) error {
	if err := c.TCPConn.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.SetReadDeadline(t)
}

// requestStack is the stack growStack leaves a goroutine with room for, a
// governed request's deepest path before its upstream call with margin.
const requestStack = 16 << 10

// growStack makes the calling goroutine's stack hold requestStack more
// bytes than it uses now (the runtime doubles it as needed).
//
//go:noinline
func growStack() byte {
	var b [requestStack]byte
	return stackSink(b[:])
}

//go:noinline
func stackSink(b []byte) byte { return b[len(b)-1] }
