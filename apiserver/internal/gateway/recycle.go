package gateway

import (
	"net"
	"sync"
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
	// request (the server's IdleTimeout; 0: no bound); horizon how far
	// ahead a connection's read deadline is armed (serverConn).
	idle, horizon time.Duration

	mu     sync.Mutex
	closed bool
	back   chan net.Conn // given back, not yet accepted (buffered)
}

type acceptResult struct {
	conn net.Conn
	err  error
}

func newRecyclingListener(inner net.Listener, idle, horizon time.Duration) *recyclingListener {
	l := &recyclingListener{Listener: inner, accepted: make(chan acceptResult), done: make(chan struct{}),
		back: make(chan net.Conn, recycleBacklog), idle: idle, horizon: horizon}
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
		if r.err != nil {
			return nil, r.err
		}
		return newServerConn(r.conn, l.horizon), nil
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
	case l.back <- recycled(c, l.idle, l.horizon):
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
// client connection back to it when they end cleanly (keep-alive), and so
// that net/http's read deadlines on its connections are kept lazily
// (serverConn). Serve the returned listener instead of ln. A connection
// given back waits up to s.IdleTimeout for the client's next request, as
// net/http's kept-alive connections do.
func (s *Streams) Listen(ln net.Listener) net.Listener {
	l := newRecyclingListener(ln, s.IdleTimeout, s.HeaderTimeout)
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
