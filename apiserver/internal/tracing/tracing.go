// Package tracing is the API server's OpenTelemetry tracing (docs/design.md §7:
// spans exported over OTLP/HTTP when SVC_OTEL_EXPORTER_OTLP_ENDPOINT or the
// standard OTEL_EXPORTER_OTLP_ENDPOINT is set, off otherwise). Off means
// free: a nil or disabled *Tracer starts no spans, allocates nothing and
// writes no traceparent.
package tracing

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName names the instrumentation scope of every span.
const ScopeName = "github.com/svc-dev/svc/apiserver"

// Tracer starts spans when tracing is on. The zero value and nil are off.
type Tracer struct {
	t    trace.Tracer
	prop propagation.TextMapPropagator
}

// noop is the span handed out when tracing is off: it records nothing.
var noop = trace.SpanFromContext(context.Background())

// New traces to tp (tests pass an SDK provider with an in-memory exporter)
// and propagates W3C trace context.
func New(tp trace.TracerProvider) *Tracer {
	return &Tracer{t: tp.Tracer(ScopeName), prop: propagation.TraceContext{}}
}

// On reports whether spans are recorded.
func (t *Tracer) On() bool { return t != nil && t.t != nil }

// Propagator is the trace-context propagator, nil when tracing is off.
func (t *Tracer) Propagator() propagation.TextMapPropagator {
	if !t.On() {
		return nil
	}
	return t.prop
}

// Start starts a span named name as a child of ctx's span. Off, it returns
// ctx and a span that records nothing.
func (t *Tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !t.On() {
		return ctx, noop
	}
	return t.t.Start(ctx, name, opts...)
}

// Endpoint picks the OTLP base URL: SVC_OTEL_EXPORTER_OTLP_ENDPOINT, else
// OTEL_EXPORTER_OTLP_ENDPOINT (getenv is os.Getenv in the binary).
func Endpoint(getenv func(string) string) string {
	if v := getenv("SVC_OTEL_EXPORTER_OTLP_ENDPOINT"); v != "" {
		return v
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
}

// Setup returns a tracer exporting over OTLP/HTTP to endpoint (a base URL;
// spans go to <endpoint>/v1/traces, as the OTLP spec says of
// OTEL_EXPORTER_OTLP_ENDPOINT) and the function that flushes and stops it.
// An empty endpoint gives the off tracer and a no-op shutdown.
func Setup(ctx context.Context, endpoint, service string) (*Tracer, func(context.Context) error, error) {
	if endpoint == "" {
		return nil, func(context.Context) error { return nil }, nil
	}
	if !strings.HasPrefix(endpoint, "http://") && !strings.HasPrefix(endpoint, "https://") {
		return nil, nil, fmt.Errorf("tracing: OTLP endpoint %q must be an http:// or https:// URL", endpoint)
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(strings.TrimRight(endpoint, "/")+"/v1/traces"))
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override the service
	// name; the batch processor reads OTEL_BSP_*.
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return New(tp), tp.Shutdown, nil
}
