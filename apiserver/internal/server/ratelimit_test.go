package server_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/server"
	"github.com/svc-dev/svc/apiserver/internal/server/servertest"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/apiserver/internal/upstream"
	"github.com/svc-dev/svc/shared/testenv/fakeupstream"
	"github.com/svc-dev/svc/shared/testenv/testhttp"
)

// Every answer from admission on carries OpenAI's rate-limit headers on the
// OpenAI-format routes, Anthropic's on Messages, and the IETF pair on both;
// a refusal too.
func TestRateLimitHeaders(t *testing.T) {
	t.Parallel()
	up := fakeupstream.New(t)
	dir := t.TempDir()
	models, plans := filepath.Join(dir, "models.yaml"), filepath.Join(dir, "plans.yaml")
	if err := os.WriteFile(models, []byte(fmt.Sprintf(`providers:
  - {name: main, type: openai, base_url: %q}
models:
  - {id: svc-2-0, tier: standard, price: {input_per_mtok: 2, output_per_mtok: 8}, deployments: [{provider: main, upstream_model: up-2}]}
`, up.BaseURL())), 0o600); err != nil {
		t.Fatal(err)
	}
	// 2 requests a minute; a 5 h window of 1 credit = 500,000 input tokens at 2 credits per million.
	if err := os.WriteFile(plans, []byte(`plans:
  - {name: free, tiers: [standard], rpm: 2, workspace_rpm: 1000, windows: [{name: 5h, duration: 5h, credits: 1}]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cat, err := catalog.Load(catalog.Options{ModelsFile: models, PlansFile: plans})
	if err != nil {
		t.Fatal(err)
	}
	db := storetest.Postgres(t)
	srv := servertest.New(t, server.Deps{Store: db, Catalog: cat, Upstream: upstream.New(upstream.Options{})})
	key := servertest.NewAccount(t, db).Key

	post := func(path, body string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, _ := testhttp.Do(t, nil, req, key)
		return resp
	}
	duration := func(h http.Header, name string, most time.Duration) {
		t.Helper()
		if d, err := time.ParseDuration(h.Get(name)); err != nil || d <= 0 || d > most {
			t.Errorf("%s = %q, want a duration in (0, %v]", name, h.Get(name), most)
		}
	}
	rfc3339 := func(h http.Header, name string, most time.Duration) {
		t.Helper()
		if at, err := time.Parse(time.RFC3339, h.Get(name)); err != nil || time.Until(at) < -time.Second || time.Until(at) > most {
			t.Errorf("%s = %q, want a time within %v", name, h.Get(name), most)
		}
	}
	tokensLeft := func(h http.Header, name string) {
		t.Helper()
		if n, err := strconv.Atoi(h.Get(name)); err != nil || n < 0 || n > 500000 {
			t.Errorf("%s = %q, want 0..500000", name, h.Get(name))
		}
	}
	ietf := regexp.MustCompile(`^"requests";r=[0-9]+;t=[0-9]+$`)

	chat := post("/v1/chat/completions", `{"model":"svc-2-0","messages":[{"role":"user","content":"hi"}]}`)
	h := chat.Header
	if chat.StatusCode != http.StatusOK || h.Get("X-Ratelimit-Limit-Requests") != "2" || h.Get("X-Ratelimit-Remaining-Requests") != "1" ||
		h.Get("X-Ratelimit-Limit-Tokens") != "500000" || h.Get("Anthropic-Ratelimit-Requests-Limit") != "" {
		t.Fatalf("chat completion %d: headers %v", chat.StatusCode, h)
	}
	duration(h, "X-Ratelimit-Reset-Requests", time.Minute)
	duration(h, "X-Ratelimit-Reset-Tokens", 5*time.Hour)
	tokensLeft(h, "X-Ratelimit-Remaining-Tokens")
	if h.Get("Ratelimit-Policy") != `"requests";q=2;w=60` || !ietf.MatchString(h.Get("Ratelimit")) {
		t.Errorf("IETF pair %q, %q", h.Get("Ratelimit-Policy"), h.Get("Ratelimit"))
	}
	// The generic trio is a refusal's only (below).
	if h.Get("X-Ratelimit-Limit") != "" || h.Get("X-Ratelimit-Remaining") != "" || h.Get("X-Ratelimit-Reset") != "" {
		t.Errorf("admitted answer carries the generic trio: %v", h)
	}

	msg := post("/v1/messages", `{"model":"svc-2-0","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`)
	h = msg.Header
	if msg.StatusCode != http.StatusOK || h.Get("Anthropic-Ratelimit-Requests-Limit") != "2" || h.Get("Anthropic-Ratelimit-Requests-Remaining") != "0" ||
		h.Get("Anthropic-Ratelimit-Tokens-Limit") != "500000" || h.Get("X-Ratelimit-Limit-Requests") != "" {
		t.Fatalf("messages %d: headers %v", msg.StatusCode, h)
	}
	rfc3339(h, "Anthropic-Ratelimit-Requests-Reset", time.Minute)
	rfc3339(h, "Anthropic-Ratelimit-Tokens-Reset", 5*time.Hour)
	tokensLeft(h, "Anthropic-Ratelimit-Tokens-Remaining")
	if !ietf.MatchString(h.Get("Ratelimit")) {
		t.Errorf("RateLimit %q", h.Get("Ratelimit"))
	}

	// The third request of the minute is refused, with the same headers.
	refused := post("/v1/chat/completions", `{"model":"svc-2-0","messages":[{"role":"user","content":"hi"}]}`)
	h = refused.Header
	if refused.StatusCode != http.StatusTooManyRequests || h.Get("X-Ratelimit-Limit-Requests") != "2" ||
		h.Get("X-Ratelimit-Remaining-Requests") != "0" || h.Get("Retry-After") == "" ||
		h.Get("X-Ratelimit-Limit") != "2" || h.Get("X-Ratelimit-Remaining") != "0" || h.Get("X-Ratelimit-Reset") == "" {
		t.Fatalf("refusal %d: headers %v", refused.StatusCode, h)
	}
	duration(h, "X-Ratelimit-Reset-Requests", time.Minute)
}
