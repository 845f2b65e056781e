package tracing_test

import (
	"context"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/svc-dev/svc/apiserver/internal/tracing"
)

// Off is free: a nil tracer starts nothing, allocates nothing and has no
// propagator (so no traceparent is written). Not parallel: AllocsPerRun
// counts the whole process's allocations.
func TestOffIsFree(t *testing.T) { //nolint:paralleltest // see above
	var off *tracing.Tracer
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		c, span := off.Start(ctx, "upstream")
		span.End()
		if c != ctx || span.IsRecording() {
			t.Fatal("an off tracer changed the context or recorded")
		}
	})
	if allocs != 0 {
		t.Fatalf("an off tracer allocates %v times per span", allocs)
	}
	if off.On() || off.Propagator() != nil {
		t.Fatal("an off tracer is on or propagates")
	}
	if tr, stop, err := tracing.Setup(ctx, "", "svc"); err != nil || tr.On() || stop(ctx) != nil {
		t.Fatalf("no endpoint: tracer %v, err %v", tr, err)
	}
}

func TestOnRecordsAndPropagates(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tr := tracing.New(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	ctx, span := tr.Start(context.Background(), "upstream")
	h := http.Header{}
	tr.Propagator().Inject(ctx, propagation.HeaderCarrier(h))
	span.End()
	if len(rec.Ended()) != 1 || rec.Ended()[0].Name() != "upstream" {
		t.Fatalf("spans %v", rec.Ended())
	}
	if want := "00-" + span.SpanContext().TraceID().String() + "-" + span.SpanContext().SpanID().String() + "-01"; h.Get("Traceparent") != want {
		t.Fatalf("traceparent %q, want %q", h.Get("Traceparent"), want)
	}
}

func TestEndpointAndBadURL(t *testing.T) {
	t.Parallel()
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://std:4318"}
	if got := tracing.Endpoint(func(k string) string { return env[k] }); got != "http://std:4318" {
		t.Fatalf("standard variable: %q", got)
	}
	env["SVC_OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://svc:4318"
	if got := tracing.Endpoint(func(k string) string { return env[k] }); got != "http://svc:4318" {
		t.Fatalf("SVC_ variable first: %q", got)
	}
	if _, _, err := tracing.Setup(context.Background(), "collector:4318", "svc"); err == nil {
		t.Fatal("an endpoint without a scheme was accepted")
	}
}
