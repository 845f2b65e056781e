package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/catalog"
)

// BenchmarkParseChatRequest is the request side of every completion: the
// body read, checked (one JSON object, no repeated key) and the fields
// routing needs read (model, messages, stream).
func BenchmarkParseChatRequest(b *testing.B) {
	body := `{"model":"svc-plain","stream":true,"max_tokens":64,"temperature":0.2,` +
		`"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"benchmark request body"}]}`
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		if _, err := parseChatRequest(r, 1<<20); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUpstreamBody is the body sent to a deployment (its upstream
// model, and on a stream the usage option), beside the same edits through
// sjson alone (upstreamBodyBySjson, what it replaced).
func BenchmarkUpstreamBody(b *testing.B) {
	body := `{"model":"svc-plain","max_tokens":64,"temperature":0.2,` +
		`"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"benchmark request body"}]}`
	m := catalog.Model{ID: "svc-plain"}
	for _, stream := range []bool{false, true} {
		r := &chatRequest{body: []byte(body), Stream: stream}
		name := "plain"
		if stream {
			name = "stream"
		}
		b.Run(name+"/edit", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.upstreamBody(m, "upstream-model"); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/sjson", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := upstreamBodyBySjson(r, m, "upstream-model"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
