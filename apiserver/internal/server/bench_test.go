package server_test

import (
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/svc-dev/svc/apiserver/internal/tracing"
	"github.com/svc-dev/svc/shared/testenv/testhttp"
)

// BenchmarkCompletionInProcess is one plain completion through the whole
// in-process server (auth, admit, router, upstream, meter) on Postgres,
// for CPU and allocation profiles of the gateway's own code.
func BenchmarkCompletionInProcess(b *testing.B) {
	g := newGatewayTB(b, func(*tracetest.SpanRecorder) *tracing.Tracer { return nil })
	body := `{"model":"svc-2-0","messages":[{"role":"user","content":"benchmark request body"}]}`
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest(http.MethodPost, g.url+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+g.key)
			req.Header.Set("Content-Type", "application/json")
			if _, err := testhttp.Timed(hc, req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
