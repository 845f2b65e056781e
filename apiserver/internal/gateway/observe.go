package gateway

import (
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Overhead headers on every answer of the public API: the
// gateway's own time, as LiteLLM's x-litellm-overhead-duration-ms, and a
// Server-Timing entry per phase.
const (
	HeaderOverhead     = "X-Svc-Overhead-Duration-Ms"
	HeaderServerTiming = "Server-Timing"
)

const timingKey = "gateway.timing"

// timing is one request's phases. The overhead is the time until the
// answer's headers minus the time spent waiting on upstreams.
type timing struct {
	start    time.Time
	authEnd  time.Time // the handler started
	admit    time.Duration
	upstream time.Duration
	authSpan trace.Span
	// detached: the answer went on past the handler on a connection taken
	// over from net/http, and the server span ends with it (detach).
	detached bool
}

// authDone marks the end of authentication (the handler's first line).
func (t *timing) authDone() {
	if t.authEnd.IsZero() {
		t.authEnd = time.Now()
		if t.authSpan != nil {
			t.authSpan.End()
		}
	}
}

func timingOf(c echo.Context) *timing {
	if t, ok := c.Get(timingKey).(*timing); ok {
		return t
	}
	t := &timing{start: time.Now()} // not behind Observe (handler tests)
	c.Set(timingKey, t)
	return t
}

// writeHeaders sets the overhead headers; it runs as the answer's headers
// are written, whatever wrote them (handler, error handler, middleware).
func (t *timing) writeHeaders(h http.Header) {
	now := time.Now()
	t.authDone()
	overhead := now.Sub(t.start) - t.upstream
	// Both values from one buffer and one string.
	var arr [128]byte
	buf := strconv.AppendFloat(arr[:0], ms(overhead), 'f', 3, 64)
	n := len(buf)
	buf = append(buf, "auth;dur="...)
	buf = strconv.AppendFloat(buf, ms(t.authEnd.Sub(t.start)), 'f', 3, 64)
	buf = append(buf, ", admit;dur="...)
	buf = strconv.AppendFloat(buf, ms(t.admit), 'f', 3, 64)
	buf = append(buf, ", upstream;dur="...)
	buf = strconv.AppendFloat(buf, ms(t.upstream), 'f', 3, 64)
	s := string(buf)
	vals := []string{s[:n], s[n:]} // one backing array for both
	h[HeaderOverhead] = vals[:1:1]
	h[HeaderServerTiming] = vals[1:]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Observe is the first middleware of the public API's routes (before
// authentication): it times the phases for the overhead headers and, when
// tracing is on, opens the server span (continuing an incoming traceparent)
// and the auth span.
func (a *API) Observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		t := &timing{start: time.Now()}
		c.Set(timingKey, t)
		res := c.Response()
		res.Before(func() { t.writeHeaders(res.Header()) })
		if !a.Tracer.On() {
			return next(c)
		}
		return a.observeTraced(c, next, t)
	}
}

// observeTraced is Observe with tracing on. It is a function of its own so
// that Observe's frame, below every handler (and a long stream's relay),
// stays small.
func (a *API) observeTraced(c echo.Context, next echo.HandlerFunc, t *timing) error {
	res := c.Response()
	req := c.Request()
	ctx := a.Tracer.Propagator().Extract(req.Context(), propagation.HeaderCarrier(req.Header))
	ctx, span := a.Tracer.Start(ctx, req.Method+" "+c.Path(), trace.WithSpanKind(trace.SpanKindServer))
	_, t.authSpan = a.Tracer.Start(ctx, "auth")
	c.SetRequest(req.WithContext(ctx))
	defer func() {
		if p := recover(); p != nil {
			span.End()
			panic(p)
		}
	}()
	err := next(c)
	t.authDone()
	if t.detached {
		return nil // the stream's own goroutine ends the span
	}
	status := res.Status
	if err != nil {
		c.Error(err) // written here so the span sees the final status
		status = res.Status
	}
	endServerSpan(span, status, c.Path(), res.Header().Get(echo.HeaderXRequestID))
	return nil
}

// endServerSpan records the answer's status, route and request id on the
// server span and ends it.
func endServerSpan(span trace.Span, status int, route, requestID string) {
	span.SetAttributes(attribute.Int("http.response.status_code", status),
		attribute.String("http.route", route))
	if requestID != "" {
		span.SetAttributes(attribute.String("svc.request_id", requestID))
	}
	if status >= 500 {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
	span.End()
}
