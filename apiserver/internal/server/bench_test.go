package server_test

import (
	"bufio"
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

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

// BenchmarkStreamFirstToken is one streamed completion at a time, read to its
// end, through the whole in-process server and, beside it, straight to the
// fake upstream and through a bare reverse proxy (net/http/httputil) in the
// same process: ttft-p50-µs is the time to the first content frame, for CPU,
// block and trace profiles of the stream path (the figures of record come
// from make bench-gateway, where each server is a process of its own).
func BenchmarkStreamFirstToken(b *testing.B) {
	g := newGatewayTB(b, func(*tracetest.SpanRecorder) *tracing.Tracer { return nil })
	upURL, err := url.Parse(g.up.BaseURL())
	if err != nil {
		b.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(upURL)
	rp.FlushInterval = -1
	proxy := httptest.NewServer(http.StripPrefix("/v1", rp))
	b.Cleanup(proxy.Close)
	body := `{"model":"svc-2-0","stream":true,"messages":[{"role":"user","content":"benchmark request body"}]}`
	for _, target := range []struct{ name, url, body string }{
		{"direct", g.up.BaseURL() + "/chat/completions", strings.Replace(body, "svc-2-0", "up-2", 1)},
		{"proxy", proxy.URL + "/v1/chat/completions", strings.Replace(body, "svc-2-0", "up-2", 1)},
		{"gateway", g.url + "/v1/chat/completions", body},
	} {
		b.Run(target.name, func(b *testing.B) {
			hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			ttft := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				req, _ := http.NewRequest(http.MethodPost, target.url, strings.NewReader(target.body))
				req.Header.Set("Authorization", "Bearer "+g.key)
				req.Header.Set("Content-Type", "application/json")
				start := time.Now()
				resp, err := hc.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				br := bufio.NewReader(resp.Body)
				first := time.Duration(0)
				for {
					line, err := br.ReadSlice('\n')
					if first == 0 && bytes.Contains(line, []byte(`"content":"`)) {
						first = time.Since(start)
					}
					if err != nil {
						break
					}
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || first == 0 {
					b.Fatalf("status %d, no content frame", resp.StatusCode)
				}
				ttft = append(ttft, first)
			}
			slices.Sort(ttft)
			b.ReportMetric(float64(ttft[len(ttft)/2].Microseconds()), "ttft-p50-µs")
		})
	}
}
