// Package upstream sends chat-completion requests to the provider behind a
// public model (spec 9: a third-party model with reasoning enabled): any
// OpenAI-compatible base URL, or the built-in dev provider. Both are reached
// through one http.Client; the dev provider is an http.RoundTripper, so the
// gateway has a single code path.
package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/svc-dev/svc/apiserver/internal/catalog"
)

// Options tune the upstream client.
type Options struct {
	// HeaderTimeout bounds the wait for the upstream's response headers
	// (a stall becomes 504). Default 120 s.
	HeaderTimeout time.Duration
	// DialTimeout bounds connection set-up. Default 10 s.
	DialTimeout time.Duration
	// Propagator, when set, writes the trace context (traceparent) into
	// every upstream request; nil when tracing is off.
	Propagator propagation.TextMapPropagator
	// MaxIdleConnsPerHost bounds the idle (kept-alive) connections to one
	// upstream host; a burst of streams opens one connection each
	// (HTTP/1.1), and past this bound they are closed when the streams end
	// instead of idling with two goroutines and their buffers each.
	// Default DefaultMaxIdleConnsPerHost.
	MaxIdleConnsPerHost int
	// IdleConnTimeout closes an idle upstream connection after this long.
	// Default DefaultIdleConnTimeout.
	IdleConnTimeout time.Duration
}

// Defaults of the idle upstream pool (SVC_UPSTREAM_MAX_IDLE_CONNS_PER_HOST,
// SVC_UPSTREAM_IDLE_CONN_TIMEOUT).
const (
	DefaultMaxIdleConnsPerHost = 64
	DefaultIdleConnTimeout     = 90 * time.Second
)

// Client sends requests to providers. It sends each request through the
// transports as one exchange: no http.Client around them, so an upstream's
// redirect is not followed (it is the upstream's answer, an error to the
// caller) — a provider's API does not redirect, and following one would
// send the prompt wherever the upstream points — and nothing is spent per
// request on the client's redirect bookkeeping (a copy of the headers).
type Client struct {
	rt   transports
	dev  http.RoundTripper
	prop propagation.TextMapPropagator
}

// New returns a client with a pooled transport sized for a gateway.
func New(o Options) *Client {
	if o.HeaderTimeout == 0 {
		o.HeaderTimeout = 120 * time.Second
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = 10 * time.Second
	}
	if o.MaxIdleConnsPerHost <= 0 {
		o.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	}
	if o.IdleConnTimeout <= 0 {
		o.IdleConnTimeout = DefaultIdleConnTimeout
	}
	dial := (&net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}).DialContext
	t := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dial,
		MaxIdleConns:          max(1024, o.MaxIdleConnsPerHost),
		MaxIdleConnsPerHost:   o.MaxIdleConnsPerHost,
		IdleConnTimeout:       o.IdleConnTimeout,
		ResponseHeaderTimeout: o.HeaderTimeout,
		ForceAttemptHTTP2:     true,
		DisableCompression:    true, // stream bytes as they come; no gzip buffering
		// Each open stream holds one connection with these two buffers for
		// its whole life (memory per stream). Requests are small
		// and bodies bypass the write buffer; response bodies larger than
		// the read buffer are read straight into the caller's slice.
		WriteBufferSize: upstreamWriteBuffer,
		ReadBufferSize:  upstreamReadBuffer,
	}
	tr := transports{h1: newH1Transport(dial, o), std: t}
	return &Client{rt: tr, dev: DevTransport{}, prop: o.Propagator}
}

// transports sends plain-http requests that no proxy handles through h1 (no
// goroutines per connection) and the rest — HTTPS, which providers answer
// with HTTP/2, and proxied requests — through net/http's Transport.
type transports struct {
	h1  *h1Transport
	std *http.Transport
}

func (t transports) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "http" {
		if proxy, err := t.std.Proxy(req); err == nil && proxy == nil {
			return t.h1.RoundTrip(req)
		}
	}
	return t.std.RoundTrip(req)
}

// CloseIdleConnections closes both transports' idle connections.
func (t transports) CloseIdleConnections() {
	t.h1.CloseIdleConnections()
	t.std.CloseIdleConnections()
}

// Buffer sizes of an upstream connection (net/http's default is 4 KiB each).
const (
	upstreamWriteBuffer = 1 << 10
	upstreamReadBuffer  = 2 << 10
)

// ErrTimeout marks an upstream that did not answer in time (504).
var ErrTimeout = errors.New("upstream: timed out")

// ErrUnavailable marks an upstream that could not be reached (502).
var ErrUnavailable = errors.New("upstream: unavailable")

// Send posts body to the provider's /chat/completions. The caller closes the
// response body. Transport failures come back wrapped in ErrTimeout or
// ErrUnavailable.
func (c *Client) Send(ctx context.Context, p catalog.Provider, body []byte) (*http.Response, error) {
	return c.send(ctx, p, p.APIKey, body)
}

// endpointKey is the context key of WithEndpoint.
type endpointKey struct{}

// WithEndpoint makes the requests sent with ctx go to the provider's path
// (e.g. "/responses") instead of /chat/completions.
func WithEndpoint(ctx context.Context, path string) context.Context {
	return context.WithValue(ctx, endpointKey{}, path)
}

// send is Send with the API key chosen by the caller (a key pool's).
func (c *Client) send(ctx context.Context, p catalog.Provider, key string, body []byte) (*http.Response, error) {
	path := "/chat/completions"
	if v, ok := ctx.Value(endpointKey{}).(string); ok {
		path = v
	}
	url := strings.TrimRight(p.BaseURL, "/") + path
	if p.Type == "dev" {
		url = "http://dev.upstream.invalid/v1/chat/completions"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if c.prop != nil {
		c.prop.Inject(ctx, propagation.HeaderCarrier(req.Header))
	}
	var resp *http.Response
	if p.Type == "dev" {
		resp, err = c.dev.RoundTrip(req)
	} else {
		resp, err = c.rt.RoundTrip(req)
	}
	if err != nil {
		return nil, classify(err)
	}
	return resp, nil
}

func classify(err error) error {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return fmt.Errorf("%w: %v", ErrTimeout, err)
	}
	return fmt.Errorf("%w: %v", ErrUnavailable, err)
}
