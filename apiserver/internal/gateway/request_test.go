package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/apierr"
	"github.com/svc-dev/svc/apiserver/internal/catalog"
)

func post(body, ctype string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
	if ctype != "" {
		r.Header.Set("Content-Type", ctype)
	}
	return r
}

func TestUpstreamBodyKeepsFieldsAndAddsReasoningAndUsage(t *testing.T) {
	t.Parallel()
	req, err := parseChatRequest(post(`{"model":"svc-2.0","stream":true,"messages":[{"role":"user","content":"x"}],"top_p":0.5,"stream_options":{"foo":1}}`, "application/json"), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !req.Stream || req.IncludeUsage {
		t.Fatalf("stream %v include_usage %v", req.Stream, req.IncludeUsage)
	}
	b, err := req.upstreamBody(catalog.Model{ID: "svc-2-0", ReasoningEffort: "high"}, "up")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	_ = json.Unmarshal(b, &got)
	so, _ := got["stream_options"].(map[string]any)
	if got["model"] != "up" || got["reasoning_effort"] != "high" || got["top_p"] != 0.5 || so["include_usage"] != true || so["foo"] != 1.0 {
		t.Fatalf("upstream body %s", b)
	}
	// A client's own reasoning_effort wins.
	req2, _ := parseChatRequest(post(`{"model":"m","reasoning_effort":"low","messages":[{"role":"user","content":"x"}]}`, ""), 1<<20)
	b2, _ := req2.upstreamBody(catalog.Model{ID: "m", ReasoningEffort: "high"}, "")
	if !bytes.Contains(b2, []byte(`"reasoning_effort":"low"`)) || bytes.Contains(b2, []byte("stream_options")) {
		t.Fatalf("upstream body %s", b2)
	}
}

func TestParseRejects(t *testing.T) {
	t.Parallel()
	cases := []struct{ body, ctype, code string }{
		{`{`, "application/json", "invalid_json"},
		{`{} {}`, "application/json", "invalid_json"},
		{`null`, "application/json", "invalid_json"},
		{`{"model":1,"messages":[{"role":"user"}]}`, "application/json", "invalid_model"},
		{`{"model":"m","messages":"hi"}`, "application/json", "invalid_messages"},
		{`{"model":"m","messages":[null]}`, "application/json", "invalid_messages"},
		{`{"model":"m","messages":[{"role":""}]}`, "application/json", "invalid_messages"},
		{`{"model":"m","messages":[{"role":"user"}],"stream_options":3}`, "application/json", "invalid_stream_options"},
		{`{"model":"m","messages":[{"role":"user"}]}`, "application/x-www-form-urlencoded", "invalid_content_type"},
		{`{"model":"svc-2-0","messages":[{"role":"user"}],"model":"other"}`, "application/json", "invalid_json"},
	}
	for _, tc := range cases {
		_, err := parseChatRequest(post(tc.body, tc.ctype), 1<<20)
		e := apierr.From(err)
		if err == nil || e.Code != tc.code || e.Status != 400 {
			t.Errorf("%s: got %v, want %s", tc.body, err, tc.code)
		}
	}
	_, err := parseChatRequest(post(`{"model":"m","messages":[{"role":"user","content":"`+strings.Repeat("x", 100)+`"}]}`, ""), 50)
	if e := apierr.From(err); e.Status != 413 {
		t.Errorf("oversize: %v", err)
	}
}

func FuzzParseChatRequest(f *testing.F) {
	f.Add(`{"model":"m","messages":[{"role":"user","content":"x"}]}`)
	f.Add(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"u"}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		req, err := parseChatRequest(post(body, "application/json"), 1<<16)
		if err != nil {
			if e := apierr.From(err); e.Status != 400 && e.Status != 413 {
				t.Fatalf("status %d for %q", e.Status, body)
			}
			return
		}
		if req.Model == "" {
			t.Fatal("accepted an empty model")
		}
		out, err := req.upstreamBody(catalog.Model{ID: "m", ReasoningEffort: "low"}, "up")
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(out) {
			t.Fatalf("upstream body is not JSON: %s", out)
		}
		var got map[string]any
		_ = json.Unmarshal(out, &got)
		if got["model"] != "up" || got["reasoning_effort"] == nil {
			t.Fatalf("upstream body %s", out)
		}
	})
}
