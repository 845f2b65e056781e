package server_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/gateway"
	"github.com/svc-dev/svc/apiserver/internal/server"
	"github.com/svc-dev/svc/apiserver/internal/server/servertest"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/apiserver/internal/tracing"
	"github.com/svc-dev/svc/apiserver/internal/upstream"
	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/testenv/fakeupstream"
	"github.com/svc-dev/svc/shared/testenv/testhttp"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// harness is an in-process API server on Postgres with a fake upstream.
type harness struct {
	url, key string
	up       *fakeupstream.Server
	spans    *tracetest.SpanRecorder
	streams  *gateway.Streams
}

func newGateway(t *testing.T, tracer func(*tracetest.SpanRecorder) *tracing.Tracer) *harness {
	t.Helper()
	return newGatewayTB(t, tracer)
}

func newGatewayTB(t testing.TB, tracer func(*tracetest.SpanRecorder) *tracing.Tracer) *harness {
	t.Helper()
	return newGatewayWith(t, tracer, nil)
}

// newGatewayWith is newGateway with the server's Deps changed by mod (nil:
// unchanged) before it is built.
func newGatewayWith(t testing.TB, tracer func(*tracetest.SpanRecorder) *tracing.Tracer, mod func(*server.Deps)) *harness {
	t.Helper()
	g := &harness{up: fakeupstream.New(t), spans: tracetest.NewSpanRecorder()}
	models := filepath.Join(t.TempDir(), "models.yaml")
	if err := os.WriteFile(models, []byte(fmt.Sprintf(`providers:
  - {name: main, type: openai, base_url: %q}
models:
  - {id: svc-2-0, tier: standard, created: 1700000000, deployments: [{provider: main, upstream_model: up-2}]}
`, g.up.BaseURL())), 0o600); err != nil {
		t.Fatal(err)
	}
	plans := filepath.Join(t.TempDir(), "plans.yaml")
	if err := os.WriteFile(plans, []byte(`plans:
  - {name: free, tiers: [standard], rpm: 1000000000, workspace_rpm: 1000000000,
     windows: [{name: 5h, duration: 5h, credits: 1000000000}]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cat, err := catalog.Load(catalog.Options{ModelsFile: models, PlansFile: plans})
	if err != nil {
		t.Fatal(err)
	}
	db := storetest.Postgres(t)
	tr := tracer(g.spans)
	d := server.Deps{Store: db, Catalog: cat, Tracer: tr,
		Upstream: upstream.New(upstream.Options{Propagator: tr.Propagator()}), RuntimeSecret: []byte("s")}
	if mod != nil {
		mod(&d)
	}
	srv := servertest.New(t, d)
	g.url, g.key, g.streams = srv.URL, servertest.NewAccount(t, db).Key, srv.Streams
	return g
}

func (g *harness) post(t *testing.T, body string, h http.Header) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, g.url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range h {
		req.Header[k] = v
	}
	resp, b := testhttp.Do(t, nil, req, g.key)
	return resp, string(b)
}

func sdkTracer(rec *tracetest.SpanRecorder) *tracing.Tracer {
	return tracing.New(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
}

// With tracing on, a completion records the server span and its auth,
// admit, upstream, stream and meter children in the caller's trace, and
// the upstream receives a traceparent naming the upstream span.
func TestTracingSpans(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			t.Parallel()
			want := []string{"auth", "admit", "upstream", "meter", "POST /v1/chat/completions"}
			if stream { // relaying the chunks has a span of its own
				want = append(want, "stream")
			}
			g := newGateway(t, sdkTracer)
			parent := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
			resp, body := g.post(t, fmt.Sprintf(`{"model":"svc-2-0","stream":%v,"messages":[{"role":"user","content":"hi"}]}`, stream),
				http.Header{"Traceparent": {parent}})
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			// The meter span ends after the answer: wait for the server span.
			spans := g.spans.Ended()
			for i := 0; len(spans) < len(want) && i < 200; i++ {
				waitABit()
				spans = g.spans.Ended()
			}
			byName := map[string]sdktrace.ReadOnlySpan{}
			var names []string
			for _, s := range spans {
				byName[s.Name()] = s
				names = append(names, s.Name())
			}
			srvSpan := byName["POST /v1/chat/completions"]
			if len(spans) != len(want) || srvSpan == nil {
				t.Fatalf("spans %v, want %v", names, want)
			}
			for _, n := range want {
				s := byName[n]
				if s == nil {
					t.Fatalf("no %s span in %v", n, names)
				}
				if s.SpanContext().TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
					t.Errorf("%s span is in trace %s, not the caller's", n, s.SpanContext().TraceID())
				}
				if n != srvSpan.Name() && s.Parent().SpanID() != srvSpan.SpanContext().SpanID() {
					t.Errorf("%s span's parent is %s, want the server span", n, s.Parent().SpanID())
				}
			}
			// The server span ends with the answer, after the stream was
			// relayed and metered, not when the handler returned.
			for _, n := range want {
				if s := byName[n]; s.EndTime().After(srvSpan.EndTime()) {
					t.Errorf("%s span ended after the server span", n)
				}
			}
			if code := attrInt(srvSpan, "http.response.status_code"); code != 200 {
				t.Errorf("server span status %d", code)
			}
			if srvSpan.Parent().SpanID().String() != "b7ad6b7169203331" || srvSpan.SpanKind() != trace.SpanKindServer {
				t.Errorf("server span parent %s kind %v", srvSpan.Parent().SpanID(), srvSpan.SpanKind())
			}
			got := g.up.Requests()[0].Header.Get("Traceparent")
			sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(),
				propagation.HeaderCarrier(http.Header{"Traceparent": {got}})))
			if sc.SpanID() != byName["upstream"].SpanContext().SpanID() || sc.TraceID() != srvSpan.SpanContext().TraceID() {
				t.Errorf("upstream got traceparent %q, want the upstream span %s", got, byName["upstream"].SpanContext().SpanID())
			}
		})
	}
}

// Off, nothing is traced and no traceparent reaches the upstream; the
// overhead headers are on every answer, errors included.
func TestTracingOffAndOverheadHeaders(t *testing.T) {
	t.Parallel()
	g := newGateway(t, func(*tracetest.SpanRecorder) *tracing.Tracer { return nil })
	resp, body := g.post(t, `{"model":"svc-2-0","messages":[{"role":"user","content":"hi"}]}`,
		http.Header{"Traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if h := g.up.Requests()[0].Header.Get("Traceparent"); h != "" {
		t.Fatalf("tracing off, yet the upstream got traceparent %q", h)
	}
	for _, tc := range []struct {
		name, body string
		status     int
	}{
		{"ok", `{"model":"svc-2-0","messages":[{"role":"user","content":"hi"}]}`, 200},
		{"unknown model", `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`, 404},
		{"bad body", `{`, 400},
	} {
		resp, _ := g.post(t, tc.body, nil)
		st := resp.Header.Get("Server-Timing")
		if resp.StatusCode != tc.status || resp.Header.Get("X-Svc-Overhead-Duration-Ms") == "" ||
			!strings.Contains(st, "auth;dur=") || !strings.Contains(st, "admit;dur=") || !strings.Contains(st, "upstream;dur=") ||
			resp.Header.Get("X-Request-Id") == "" {
			t.Errorf("%s: status %d, headers %v", tc.name, resp.StatusCode, resp.Header)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, g.url+"/v1/chat/completions", bytes.NewReader(nil))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 || resp.Header.Get("X-Svc-Overhead-Duration-Ms") == "" || resp.Header.Get("X-Request-Id") == "" {
		t.Errorf("401: headers %v", resp.Header)
	}
	if len(g.spans.Ended()) != 0 {
		t.Fatalf("tracing off recorded %d spans", len(g.spans.Ended()))
	}
}

func attrInt(s sdktrace.ReadOnlySpan, key string) int64 {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.AsInt64()
		}
	}
	return -1
}
