package gateway

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// serverPair is a serverConn (horizon as given) and the client end of its
// TCP connection.
func serverPair(t *testing.T, horizon time.Duration, recycle bool) (*serverConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	raw, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	if recycle {
		return recycled(raw, time.Hour, horizon).(*serverConn), client
	}
	return newServerConn(raw, horizon).(*serverConn), client
}

// A read ends at its logical deadline and not before, whatever the armed
// one: a deadline beyond the horizon is reached through the re-armings, a
// deadline taken off lets the read wait for data past the armed one, and a
// deadline in the past ends a read at once.
func TestServerConnDeadlines(t *testing.T) {
	t.Parallel()
	const horizon = 20 * time.Millisecond
	for _, tc := range []struct {
		name     string
		set      func(c *serverConn)
		send     time.Duration // when the client writes one byte (0: never)
		timeout  bool          // the read ends in a timeout
		notAfter time.Duration // ... no sooner than this after the read began
	}{
		{"beyond the horizon", func(c *serverConn) { _ = c.SetReadDeadline(time.Now().Add(6 * horizon)) }, 0, true, 6 * horizon},
		{"within the horizon", func(c *serverConn) { _ = c.SetReadDeadline(time.Now().Add(horizon / 2)) }, 0, true, horizon / 2},
		{"taken off after one was armed", func(c *serverConn) {
			_ = c.SetReadDeadline(time.Now().Add(horizon / 2))
			_ = c.SetReadDeadline(time.Time{})
		}, 4 * horizon, false, 4 * horizon},
		{"moved later", func(c *serverConn) {
			_ = c.SetReadDeadline(time.Now().Add(horizon / 2))
			_ = c.SetReadDeadline(time.Now().Add(3 * horizon))
		}, 0, true, 3 * horizon},
		{"moved earlier", func(c *serverConn) {
			_ = c.SetReadDeadline(time.Now().Add(time.Hour))
			_ = c.SetReadDeadline(time.Now().Add(horizon / 2))
		}, 0, true, horizon / 2},
		{"past", func(c *serverConn) { _ = c.SetReadDeadline(time.Unix(1, 0)) }, 0, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, client := serverPair(t, horizon, false)
			began := time.Now()
			tc.set(c)
			if tc.send > 0 {
				time.AfterFunc(tc.send, func() { _, _ = client.Write([]byte{'x'}) })
			}
			n, err := c.Read(make([]byte, 1))
			took := time.Since(began)
			if timedOut := errors.Is(err, os.ErrDeadlineExceeded); timedOut != tc.timeout || (!tc.timeout && (n != 1 || err != nil)) {
				t.Fatalf("read %d bytes, %v; want a timeout: %v", n, err, tc.timeout)
			}
			if took < tc.notAfter {
				t.Fatalf("the read ended after %v, before %v", took, tc.notAfter)
			}
		})
	}
}

// A read net/http aborts from another goroutine (a deadline in the past
// while its background read waits) ends at once, and the connection reads
// on once the deadline is taken off.
func TestServerConnAbortedRead(t *testing.T) {
	t.Parallel()
	c, client := serverPair(t, time.Second, false)
	_ = c.SetReadDeadline(time.Now().Add(time.Hour))
	_ = c.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond) // let the read block: what is tested is its abort
	_ = c.SetReadDeadline(time.Unix(1, 0))
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the aborted read ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the read was not aborted")
	}
	_ = c.SetReadDeadline(time.Time{})
	if _, err := client.Write([]byte{'y'}); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if n, err := io.ReadFull(c, b); n != 1 || b[0] != 'y' || err != nil {
		t.Fatalf("read %q, %v after the abort", b[:n], err)
	}
}

// net/http's deadlines for one request on a kept-alive connection — the
// idle deadline after an answer, the header deadline when the next
// request's first bytes arrive and again as the headers are read, none once
// they are read — arm the socket once, while the connection idles: nothing
// between the request's arrival and its handler touches the runtime's
// timers. So too for a recycled connection's next request.
func TestServerConnArmsWhileIdle(t *testing.T) {
	t.Parallel()
	const header, idle = 10 * time.Second, 120 * time.Second
	for _, recycle := range []bool{false, true} {
		c, client := serverPair(t, header, recycle)
		if !recycle {
			_ = c.SetReadDeadline(time.Now().Add(idle)) // after the previous answer
		} else {
			_ = c.SetReadDeadline(time.Now().Add(header)) // net/http's new connection
		}
		if c.arms != 1 {
			t.Fatalf("recycled %v: %d deadlines armed while idle, want 1", recycle, c.arms)
		}
		if _, err := client.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Read(make([]byte, 4)); err != nil {
			t.Fatal(err)
		}
		if !recycle {
			_ = c.SetReadDeadline(time.Now().Add(header)) // the first bytes are in
		}
		_ = c.SetReadDeadline(time.Now().Add(header)) // reading the headers
		_ = c.SetReadDeadline(time.Time{})            // the headers are read
		if c.arms != 1 {
			t.Fatalf("recycled %v: %d deadlines armed by the request's arrival, want none", recycle, c.arms-1)
		}
	}
}
