package pairing

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/svc-dev/svc/shared/internalapi"
)

// tunnelHost is the host of every request sent through a tunnel: the
// connection is the tunnel, whatever the URL names.
const tunnelHost = "paired.invalid"

// Liveness of a tunnel's HTTP/2 connection: a ping after sendPingTimeout
// without a frame from the machine; no answer within pingTimeout closes it.
const (
	sendPingTimeout = 30 * time.Second
	pingTimeout     = 15 * time.Second
)

// errDialled: a tunnel's connection is handed out once; it is never dialled
// again (the machine dials a new tunnel instead).
var errDialled = errors.New("pairing: the tunnel's connection is already in use")

// clientConn speaks HTTP/2 with prior knowledge as the client over conn,
// the tunnel's websocket. The transport's dialler hands out conn exactly
// once; requests wait for a free stream rather than fail when all are busy.
func clientConn(ctx context.Context, conn net.Conn) (*http.ClientConn, error) {
	var once sync.Once
	dial := func(context.Context, string, string) (net.Conn, error) {
		var c net.Conn
		once.Do(func() { c = conn })
		if c == nil {
			return nil, errDialled
		}
		return c, nil
	}
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	tr := &http.Transport{DialContext: dial, Protocols: &protos, DisableCompression: true,
		HTTP2: &http.HTTP2Config{SendPingTimeout: sendPingTimeout, PingTimeout: pingTimeout}}
	return tr.NewClientConn(ctx, "http", net.JoinHostPort(tunnelHost, "80"))
}

// probe sends the pod's liveness probe through cc: any answer shows the
// machine serves HTTP/2 on the tunnel, so the tunnel is usable.
func probe(ctx context.Context, cc *http.ClientConn) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+tunnelHost+internalapi.PodHealthz, nil)
	if err != nil {
		return err
	}
	res, err := cc.RoundTrip(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	return res.Body.Close()
}

// usable reports whether cc takes new requests. Available is 0 both when
// the machine is going away (GOAWAY) and when every stream is busy; a busy
// connection still takes requests, which wait for a stream.
func usable(cc *http.ClientConn) bool {
	return cc.Err() == nil && (cc.Available() > 0 || cc.InFlight() > 0)
}
