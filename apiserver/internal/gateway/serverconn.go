package gateway

import (
	"errors"
	"net"
	"os"
	"sync"
	"time"
)

// serverConn is a client connection as the server's listener (Listen) hands
// it to net/http: a fresh one, or one given back after a taken-over stream.
//
// Read deadlines, kept lazily. For every request on a kept-alive connection
// net/http moves the read deadline three times — to the header timeout
// when the request's first bytes arrive, to it again as it starts reading
// the headers, and off once they are read — and each move is a change to
// the runtime's timer heap on the way to the handler: about 20 µs of a
// stream's first token after an idle spell on a 2 vCPU guest
// (docs/performance.md). A serverConn keeps the deadline net/http asks for
// (logical) apart from the one set on the socket (armed), which it moves
// only when it must:
//
//   - a deadline later than the armed one, or none, changes nothing; a
//     read that then times out at the armed deadline is resumed, after the
//     armed deadline is moved to the logical one (or taken off);
//   - a deadline earlier than the armed one (or with none armed) is armed,
//     at most horizon (the server's ReadHeaderTimeout) from now, so the
//     header deadline net/http sets when the next request begins is never
//     earlier than the one armed while the connection waited: an idle
//     connection wakes once per horizon to re-arm;
//   - a deadline already past (net/http aborting a background read) is
//     armed at once.
//
// A read never ends before its logical deadline, and ends at it (to the
// runtime's timer precision).
//
// A connection given back (recycled) also keeps net/http's kept-alive rule,
// although net/http takes it for a new one: a new connection's first
// request's headers are due within ReadHeaderTimeout of its acceptance,
// while a kept-alive connection waits up to IdleTimeout for the next
// request's first bytes and only then starts the header timeout. Until the
// next request's first bytes arrive, a deadline net/http sets stands for
// the idle deadline, and the first bytes start the header deadline, as long
// as net/http asked for. And net/http serves it on a fresh goroutine, whose
// starting stack grows on the next request's first deep call (the key
// lookup): stack copies on the way to the first token, several times
// dearer after an idle gap (docs/performance.md, "Where a stream's auth
// goes"). Its first Read, which net/http makes while it waits for the
// client's next request, grows the stack instead. The garbage collector
// shrinks the stack again if the connection stays idle through a cycle,
// so idle connections do not keep it.
type serverConn struct {
	*net.TCPConn // ReadFrom, CloseWrite and the rest, as net/http uses them
	horizon      time.Duration
	recycled     bool
	// Kept by Read alone (net/http never reads from two goroutines at once):
	grown   bool // the stack was grown (recycled)
	pending bool // a recycled connection's next request has not begun

	mu      sync.Mutex
	logical time.Time // the read deadline asked for (zero: none)
	armed   time.Time // the read deadline set on the socket (zero: none)
	// A recycled connection waiting for the next request's first bytes.
	waiting   bool
	idleUntil time.Time     // the idle deadline (zero: none)
	header    time.Duration // the header timeout asked for while waiting (0: none)
	arms      int           // deadlines set on the socket (tests)
}

// newServerConn wraps a newly accepted connection (only TCP ones; others are
// returned as they are).
func newServerConn(c net.Conn, horizon time.Duration) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	return &serverConn{TCPConn: tc, horizon: horizon}
}

// recycled wraps a connection given back for net/http's next accept, its
// deadlines cleared (connEvents.finish); it waits up to idle (0: no bound)
// for the client's next request.
func recycled(c net.Conn, idle, horizon time.Duration) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	sc := &serverConn{TCPConn: tc, horizon: horizon, recycled: true, waiting: true, pending: true}
	if idle > 0 {
		sc.idleUntil = time.Now().Add(idle)
	}
	return sc
}

// tcpConn is the TCP connection under c (nil: not TCP), so that a stream
// on a connection accepted again can be taken over and given back again.
func tcpConn(c net.Conn) *net.TCPConn {
	switch c := c.(type) {
	case *net.TCPConn:
		return c
	case *serverConn:
		return c.TCPConn
	}
	return nil
}

func (c *serverConn) Read(p []byte) (int, error) {
	if c.recycled && !c.grown {
		c.grown = true
		growStack()
	}
	for {
		n, err := c.TCPConn.Read(p)
		if n > 0 && c.pending {
			c.pending = false
			c.begun()
		}
		if n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) || !c.resume() {
			return n, err
		}
	}
}

// begun starts the header deadline of a recycled connection's next request
// at its first bytes.
func (c *serverConn) begun() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waiting = false
	c.logical = time.Time{}
	if c.header > 0 {
		c.logical = time.Now().Add(c.header)
	}
	_ = c.arm(time.Now())
}

// resume reports whether a read that timed out at the armed deadline goes
// on: its logical deadline has not passed. The deadline is armed again, or
// taken off when there is none.
func (c *serverConn) resume() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if !c.logical.IsZero() && !now.Before(c.logical) {
		return false
	}
	if c.logical.IsZero() {
		c.armed = time.Time{}
		c.arms++
		return c.TCPConn.SetReadDeadline(time.Time{}) == nil
	}
	c.armed = time.Time{}
	return c.arm(now) == nil
}

// arm sets the socket's read deadline when the logical one needs it: none
// is armed, or the armed one is later than the logical one or has passed.
// c.mu is held.
func (c *serverConn) arm(now time.Time) error {
	if c.logical.IsZero() {
		return nil
	}
	if !c.armed.IsZero() && !c.armed.After(c.logical) && c.armed.After(now) {
		return nil
	}
	at := c.logical
	if c.horizon > 0 && at.After(now.Add(c.horizon)) {
		at = now.Add(c.horizon)
	}
	c.armed = at
	c.arms++
	return c.TCPConn.SetReadDeadline(at)
}

// SetReadDeadline sets the logical read deadline (see serverConn). On a
// recycled connection still waiting for the next request, a deadline not
// yet passed stands for the idle deadline, and its distance from now
// becomes the header timeout the first bytes start.
func (c *serverConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if c.waiting && (t.IsZero() || t.After(now)) {
		c.header = 0
		if !t.IsZero() {
			c.header = t.Sub(now)
		}
		t = c.idleUntil
	}
	c.logical = t
	return c.arm(now)
}

// SetDeadline sets the write deadline as it is and the read deadline as
// SetReadDeadline does.
func (c *serverConn) SetDeadline(t time.Time) error {
	if err := c.TCPConn.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.SetReadDeadline(t)
}
