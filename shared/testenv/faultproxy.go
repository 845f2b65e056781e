package testenv

import (
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"
)

// FaultProxy is a TCP proxy in front of a real server (Postgres, MinIO) that
// a test can take down and bring back, to make a dependency unreachable
// without touching it.
type FaultProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool
	hang  bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewFaultProxy listens on a free 127.0.0.1 port and forwards every
// connection to targetAddr (host:port). It is closed when the test ends.
func NewFaultProxy(t testing.TB, targetAddr string) *FaultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: fault proxy: %v", err)
	}
	p := &FaultProxy{ln: ln, target: targetAddr, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port; connect here instead of the target.
func (p *FaultProxy) Addr() string { return p.ln.Addr().String() }

// RewriteURL returns rawURL (a postgres:// DSN, an http:// endpoint) with its
// host:port replaced by the proxy's.
func (p *FaultProxy) RewriteURL(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", err
	}
	u.Host = p.Addr()
	return u.String(), nil
}

// SetDown takes the target away (true) or brings it back (false). While
// down, existing connections are closed and new ones are reset at once, as
// if the server had crashed.
func (p *FaultProxy) SetDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			reset(c)
		}
	}
}

// SetHang makes the target a black hole (true): existing connections are
// reset and new ones are accepted but never answered, as in a network
// partition where packets vanish; clients wait until their own deadline.
// SetHang(false) resets the held connections and forwards again.
func (p *FaultProxy) SetHang(hang bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hang != hang {
		for c := range p.conns {
			reset(c)
		}
	}
	p.hang = hang
}

// Close stops the proxy and closes every connection.
func (p *FaultProxy) Close() {
	p.ln.Close()
	p.SetDown(true)
	p.wg.Wait()
}

func (p *FaultProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.wg.Add(1)
		go p.handle(c)
	}
}

// track registers c unless the proxy is down.
func (p *FaultProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *FaultProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		c.Close()
	}
}

func (p *FaultProxy) handle(client net.Conn) {
	defer p.wg.Done()
	if !p.track(client) {
		reset(client)
		return
	}
	p.mu.Lock()
	hang := p.hang
	p.mu.Unlock()
	if hang {
		// Read and drop until the client gives up or the hang ends.
		io.Copy(io.Discard, client)
		p.untrack(client)
		return
	}
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil || !p.track(server) {
		if server != nil {
			server.Close()
		}
		p.untrack(client)
		return
	}
	defer p.untrack(client, server)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done // one side ended: close both (the deferred untrack)
}

// reset closes c with an RST rather than a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}
