package e2e

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/svc-dev/svc/shared/runtimetoken"
	"github.com/svc-dev/svc/shared/testenv/fakeupstream"
)

func TestModelsOnBothBases(t *testing.T) {
	t.Parallel()
	_, a, acc := freeAccount(t)
	for _, base := range []string{a.URL + "/api/v1", a.URL + "/v1"} {
		c := client(base, acc.key)
		var raw *http.Response
		page, err := c.Models.List(context.Background(), option.WithResponseInto(&raw))
		must(t, err)
		var ids []string
		for _, m := range page.Data {
			ids = append(ids, m.ID)
			if m.Object != "model" || m.OwnedBy != "svc" {
				t.Errorf("%s: model %+v", base, m)
			}
			if m.JSON.ExtraFields["display_name"].Raw() == "" {
				t.Errorf("%s: model %s has no display_name", base, m.ID)
			}
		}
		// The free plan has no premium tier: that model is not listed.
		if strings.Join(ids, ",") != "svc-2-0,svc-1-0" {
			t.Fatalf("%s: ids %v", base, ids)
		}
	}
}

func TestPlainCompletionForwardsAndRewrites(t *testing.T) {
	t.Parallel()
	e, a, acc := freeAccount(t)
	c := client(a.URL+"/api/v1", acc.key)
	p := userMsg("hello world")
	p.Model = "svc-2.0" // the alias
	p.Temperature = openai.Float(0.25)
	var raw *http.Response
	resp, err := c.Chat.Completions.New(context.Background(), p, option.WithJSONSet("x_vendor_field", "kept"), option.WithResponseInto(&raw))
	must(t, err)
	// OpenAI's rate-limit headers, as the SDK hands them over: the free
	// plan's 1000 requests a minute per key and its tightest usage window
	// in tokens.
	h := raw.Header
	if rem, err := strconv.Atoi(h.Get("x-ratelimit-remaining-requests")); err != nil || rem < 0 || rem >= 1000 {
		t.Errorf("x-ratelimit-remaining-requests %q", h.Get("x-ratelimit-remaining-requests"))
	}
	if h.Get("x-ratelimit-limit-requests") != "1000" ||
		h.Get("x-ratelimit-limit-tokens") == "" || h.Get("x-ratelimit-remaining-tokens") == "" ||
		h.Get("RateLimit-Policy") != `"requests";q=1000;w=60` || h.Get("RateLimit") == "" {
		t.Errorf("rate-limit headers %v", h)
	}
	for _, name := range []string{"x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"} {
		if d, err := time.ParseDuration(h.Get(name)); err != nil || d <= 0 {
			t.Errorf("%s = %q, want a duration", name, h.Get(name))
		}
	}
	if resp.Model != "svc-2-0" {
		t.Errorf("response model %q, want the public id svc-2-0", resp.Model)
	}
	if resp.Choices[0].Message.Content != "echo: hello world" {
		t.Errorf("content %q", resp.Choices[0].Message.Content)
	}
	reqs := e.upstream.Requests()
	if len(reqs) != 1 {
		t.Fatalf("upstream saw %d requests", len(reqs))
	}
	b := reqs[0].Body
	if b["model"] != "up-2" || b["reasoning_effort"] != "medium" || b["temperature"] != 0.25 || b["x_vendor_field"] != "kept" {
		t.Errorf("upstream body %v", b)
	}
	if got := reqs[0].Header.Get("Authorization"); got != "Bearer upstream-secret" {
		t.Errorf("upstream auth %q", got)
	}
	// The client's key never reaches the upstream.
	if strings.Contains(reqs[0].Header.Get("Authorization"), acc.key) {
		t.Error("client key forwarded upstream")
	}
}

func TestStreamingFlushesEachChunk(t *testing.T) {
	t.Parallel()
	e, a, acc := freeAccount(t)
	hold := make(chan struct{})
	e.upstream.Script(func(fakeupstream.Request) fakeupstream.Reply {
		return fakeupstream.Reply{Text: "one two three", PromptTokens: 9, CompletionTokens: 3, Hold: hold}
	})
	c := client(a.URL+"/v1", acc.key)
	stream := c.Chat.Completions.NewStreaming(context.Background(), userMsg("hi"))
	defer stream.Close()
	// The upstream holds after its first chunk: that chunk must reach us now.
	if !stream.Next() {
		t.Fatalf("first chunk did not arrive while the upstream was still open: %v", stream.Err())
	}
	if stream.Current().Model != "svc-2-0" {
		t.Errorf("chunk model %q", stream.Current().Model)
	}
	close(hold)
	var text strings.Builder
	for stream.Next() {
		ch := stream.Current()
		if ch.JSON.Usage.Valid() && ch.Usage.TotalTokens != 0 {
			t.Error("usage chunk reached a client that did not ask for it")
		}
		if len(ch.Choices) > 0 {
			text.WriteString(ch.Choices[0].Delta.Content)
		}
	}
	must(t, stream.Err())
	if text.String() != "one two three" {
		t.Errorf("streamed text %q", text.String())
	}
	if so, _ := e.upstream.Requests()[0].Body["stream_options"].(map[string]any); so["include_usage"] != true {
		t.Error("usage was not requested upstream")
	}

	// A client that asks for usage gets the usage chunk.
	e.upstream.Script(func(fakeupstream.Request) fakeupstream.Reply {
		return fakeupstream.Reply{Text: "a b", PromptTokens: 4, CompletionTokens: 2}
	})
	p := userMsg("x")
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	s2 := c.Chat.Completions.NewStreaming(context.Background(), p)
	var total int64
	for s2.Next() {
		if u := s2.Current().Usage; u.TotalTokens > 0 {
			total = u.TotalTokens
		}
	}
	must(t, s2.Err())
	if total != 6 {
		t.Errorf("usage chunk total %d, want 6", total)
	}
}

func TestErrorCodes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.startAPI()
	free := e.account("free")
	slow := e.account("slow")
	tiny := e.account("tiny")
	revoked := e.account("free")
	e.admin("key", "revoke", "--id", revoked.keyID)
	project := e.admin("project", "create", "--workspace", free.workspace, "--name", "p")["id"].(string)
	rt := runtimetoken.Mint([]byte("e2e-runtime-secret"), project)

	// 402 needs a window already used up: one request spends the tiny allowance.
	if _, err := client(a.URL+"/v1", tiny.key).Chat.Completions.New(context.Background(), userMsg("spend")); err != nil {
		t.Fatal(err)
	}
	waitUsage(t, e, tiny.workspace, 1) // usage lands within the recorder's flush interval
	cases := []struct {
		name, key, model string
		status           int
		typ, code        string
	}{
		{"no key", "", "svc-2-0", 401, "authentication_error", "invalid_api_key"},
		{"bad key", "svc_sk_aaaaaaaaaaaa_" + strings.Repeat("b", 40), "svc-2-0", 401, "authentication_error", "invalid_api_key"},
		{"malformed key", "hello", "svc-2-0", 401, "authentication_error", "invalid_api_key"},
		{"runtime token", rt, "svc-2-0", 401, "authentication_error", "invalid_api_key"},
		{"revoked key", revoked.key, "svc-2-0", 401, "authentication_error", "invalid_api_key"},
		{"unknown model", free.key, "gpt-4", 404, "invalid_request_error", "model_not_found"},
		{"tier", free.key, "svc-premium", 403, "billing_error", "model_tier_restricted"},
		{"usage", tiny.key, "svc-2-0", 402, "billing_error", "usage_limit_reached"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := len(e.upstream.Requests())
			p := userMsg("x")
			p.Model = tc.model
			var raw *http.Response
			_, err := client(a.URL+"/api/v1", tc.key).Chat.Completions.New(context.Background(), p, option.WithResponseInto(&raw))
			var ae *openai.Error
			if !errors.As(err, &ae) {
				t.Fatalf("want an API error, got %v", err)
			}
			if ae.StatusCode != tc.status || ae.Type != tc.typ || ae.Code != tc.code || ae.Message == "" {
				t.Fatalf("got %d %s %s %q, want %d %s %s", ae.StatusCode, ae.Type, ae.Code, ae.Message, tc.status, tc.typ, tc.code)
			}
			if len(e.upstream.Requests()) != before {
				t.Error("a refused request reached the upstream")
			}
			if tc.status == 402 && !strings.Contains(ae.RawJSON(), "resets_at") {
				t.Errorf("402 without resets_at: %s", ae.RawJSON())
			}
		})
	}

	// The slow plan admits 3 requests a minute; the first refusal carries
	// Retry-After and the X-RateLimit headers.
	t.Run("rate", func(t *testing.T) {
		c := client(a.URL+"/api/v1", slow.key)
		for i := 0; i < 10; i++ {
			_, err := c.Chat.Completions.New(context.Background(), userMsg("x"))
			if err == nil {
				continue
			}
			var ae *openai.Error
			if !errors.As(err, &ae) || ae.StatusCode != 429 || ae.Type != "rate_limit_error" || ae.Code != "rate_limited" {
				t.Fatalf("want 429 rate_limit_error rate_limited, got %v", err)
			}
			if i < 3 {
				t.Fatalf("refused after %d requests, the plan allows 3", i)
			}
			h := ae.Response.Header
			if ra, err := strconv.Atoi(h.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
				t.Errorf("Retry-After %q", h.Get("Retry-After"))
			}
			if h.Get("X-RateLimit-Limit") != "3" || h.Get("X-RateLimit-Remaining") != "0" || h.Get("X-RateLimit-Reset") == "" ||
				h.Get("x-ratelimit-limit-requests") != "3" || h.Get("x-ratelimit-remaining-requests") != "0" {
				t.Errorf("rate headers %v", h)
			}
			if d, err := time.ParseDuration(h.Get("x-ratelimit-reset-requests")); err != nil || d <= 0 || d > time.Minute {
				t.Errorf("x-ratelimit-reset-requests %q", h.Get("x-ratelimit-reset-requests"))
			}
			return
		}
		t.Fatal("10 requests were admitted on a plan of 3 per minute")
	})

	// Usage-based pricing lifts the 402.
	e.admin("workspace", "set", "--id", tiny.workspace, "--usage-based-pricing=true")
	deadline := time.Now().Add(2 * time.Second) // the key cache refreshes within 1 s
	for {
		_, err := client(a.URL+"/v1", tiny.key).Chat.Completions.New(context.Background(), userMsg("again"))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("usage-based pricing did not lift the limit: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A key revoked while in use stops working within one second.
func TestRevokedKeyStopsWithinASecond(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.startAPI()
	b := e.startAPI()
	acc := e.account("free")
	for _, srv := range []*api{a, b} {
		if _, err := client(srv.URL+"/v1", acc.key).Models.List(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	e.admin("key", "revoke", "--id", acc.keyID)
	revokedAt := time.Now()
	for _, srv := range []*api{a, b} {
		for {
			_, err := client(srv.URL+"/v1", acc.key).Models.List(context.Background())
			var ae *openai.Error
			if errors.As(err, &ae) && ae.StatusCode == 401 {
				break
			}
			if time.Since(revokedAt) > time.Second {
				t.Fatalf("%s still accepts the revoked key after 1 s", srv.URL)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.startAPI("SVC_MAX_BODY_BYTES=2048")
	acc := e.account("free")
	url := a.URL + "/api/v1/chat/completions"
	cases := []struct {
		name, ctype, body string
		status            int
		code              string
	}{
		{"malformed json", "application/json", `{"model":`, 400, "invalid_json"},
		{"not an object", "application/json", `[1,2]`, 400, "invalid_json"},
		{"missing model", "application/json", `{"messages":[{"role":"user","content":"x"}]}`, 400, "invalid_model"},
		{"missing messages", "application/json", `{"model":"svc-2-0"}`, 400, "invalid_messages"},
		{"empty messages", "application/json", `{"model":"svc-2-0","messages":[]}`, 400, "invalid_messages"},
		{"message without role", "application/json", `{"model":"svc-2-0","messages":[{"content":"x"}]}`, 400, "invalid_messages"},
		{"stream not bool", "application/json", `{"model":"svc-2-0","stream":"yes","messages":[{"role":"user","content":"x"}]}`, 400, "invalid_stream"},
		{"wrong content type", "text/plain", `{"model":"svc-2-0","messages":[{"role":"user","content":"x"}]}`, 400, "invalid_content_type"},
		{"too large", "application/json", `{"model":"svc-2-0","messages":[{"role":"user","content":"` + strings.Repeat("a", 4096) + `"}]}`, 413, "request_too_large"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, m := rawPost(t, url, acc.key, tc.ctype, []byte(tc.body))
			typ, code := errFields(m)
			if resp.StatusCode != tc.status || code != tc.code || typ != "invalid_request_error" {
				t.Fatalf("got %d %s %s, want %d %s", resp.StatusCode, typ, code, tc.status, tc.code)
			}
		})
	}
	if n := len(e.upstream.Requests()); n != 0 {
		t.Fatalf("bad input reached the upstream %d times", n)
	}
	assertOnlyNextIsMetered(t, e, a, acc)
}

func TestUpstreamFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.startAPI("SVC_UPSTREAM_TIMEOUT=300ms")
	acc := e.account("free")
	c := client(a.URL+"/v1", acc.key)
	cases := []struct {
		name   string
		reply  fakeupstream.Reply
		status int
		typ    string
	}{
		{"stall", fakeupstream.Reply{Stall: true}, 504, "server_error"},
		{"server error", fakeupstream.Reply{Status: 500}, 502, "server_error"},
		{"upstream 429", fakeupstream.Reply{Status: 429}, 429, "rate_limit_error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.upstream.Script(func(fakeupstream.Request) fakeupstream.Reply { return tc.reply })
			_, err := c.Chat.Completions.New(context.Background(), userMsg("x"))
			var ae *openai.Error
			if !errors.As(err, &ae) || ae.StatusCode != tc.status || ae.Type != tc.typ {
				t.Fatalf("got %v, want %d %s", err, tc.status, tc.typ)
			}
		})
	}
	// Mid-stream break: the client sees one error event.
	e.upstream.Script(func(fakeupstream.Request) fakeupstream.Reply {
		return fakeupstream.Reply{Text: "a b c d", BreakMidStream: true}
	})
	s := c.Chat.Completions.NewStreaming(context.Background(), userMsg("x"))
	for s.Next() {
	}
	if s.Err() == nil || !strings.Contains(s.Err().Error(), "stream ended") {
		t.Fatalf("mid-stream failure must reach the client as an error event, got %v", s.Err())
	}
	// Upstream down entirely.
	e.upstream.Close()
	_, err := c.Chat.Completions.New(context.Background(), userMsg("x"))
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 502 || ae.Type != "server_error" {
		t.Fatalf("upstream down: %v", err)
	}
	e.upstream = fakeupstream.New(t) // a live upstream again, on a new address
	b := e.startAPIWithModels()
	assertOnlyNextIsMetered(t, e, b, acc)
}
