package gateway

import (
	"context"
	"net"
	"sync"
	"time"
)

// StreamsCutGrace bounds how long Streams.Shutdown waits, after its
// deadline, for the streams it cut to meter what they saw and end.
const StreamsCutGrace = 5 * time.Second

// Streams tracks the streams relayed on connections taken over from
// net/http, which http.Server.Shutdown neither sees nor waits for. The zero
// value is ready to use.
type Streams struct {
	// IdleTimeout bounds how long a connection given back after its stream
	// waits for the client's next request (Listen): the server's
	// http.Server IdleTimeout (0: no bound). Set it before Listen.
	IdleTimeout time.Duration
	// HeaderTimeout is the server's ReadHeaderTimeout: how far ahead a
	// connection's read deadline is armed (serverConn; 0: exactly). Set it
	// before Listen.
	HeaderTimeout time.Duration

	mu    sync.Mutex
	open  map[*held]struct{}
	empty chan struct{} // closed when open empties (made by a waiter)
	cut   bool          // past the shutdown deadline: streams are cut
	// listener takes the connections of finished streams back (Listen;
	// nil: they are closed).
	listener *recyclingListener
}

// held is one open stream: its client connection (nil until it is taken
// over) and the cancel of its upstream exchange.
type held struct {
	conn   net.Conn
	cancel context.CancelFunc
}

// cutOff closes the connection before it cancels the upstream exchange: the
// relay then ends on a failed write and never writes the last chunk, so the
// client sees a cut answer rather than a clean end.
func (h *held) cutOff() {
	if h.conn != nil {
		h.conn.Close()
	}
	h.cancel()
}

// add records an open stream, before its connection is taken over; one that
// opens after the shutdown deadline is cut at once (it still ends through
// remove).
func (s *Streams) add(cancel context.CancelFunc) *held {
	h := &held{cancel: cancel}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open == nil {
		s.open = map[*held]struct{}{}
	}
	s.open[h] = struct{}{}
	if s.cut {
		h.cutOff()
	}
	return h
}

// attach records the connection a stream was taken over on; past the
// shutdown deadline the stream is cut at once.
func (s *Streams) attach(h *held, conn net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h.conn = conn
	if s.cut {
		h.cutOff()
	}
}

// remove records the end of a stream (after it was metered).
func (s *Streams) remove(h *held) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.open, h)
	if len(s.open) == 0 && s.empty != nil {
		close(s.empty)
		s.empty = nil
	}
}

// Open is the number of open streams.
func (s *Streams) Open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open)
}

// Shutdown waits until no stream is open or ctx ends. At ctx's end it cuts
// the open streams (their upstream exchange is cancelled and their client
// connection closed), waits up to StreamsCutGrace for them to meter and
// end, and returns ctx's error. Call it after http.Server.Shutdown, with the
// same deadline.
func (s *Streams) Shutdown(ctx context.Context) error {
	if s.wait(ctx) == nil {
		return nil
	}
	s.mu.Lock()
	s.cut = true
	for h := range s.open {
		h.cutOff()
	}
	s.mu.Unlock()
	cctx, cancel := context.WithTimeout(context.Background(), StreamsCutGrace)
	defer cancel()
	_ = s.wait(cctx)
	return ctx.Err()
}

// wait returns nil once no stream is open, or ctx's error.
func (s *Streams) wait(ctx context.Context) error {
	s.mu.Lock()
	if len(s.open) == 0 {
		s.mu.Unlock()
		return nil
	}
	if s.empty == nil {
		s.empty = make(chan struct{})
	}
	empty := s.empty
	s.mu.Unlock()
	select {
	case <-empty:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
