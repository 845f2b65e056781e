package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
