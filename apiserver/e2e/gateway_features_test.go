package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/svc-dev/svc/shared/testenv/fakeupstream"
)

// What teams pick a gateway for, driven from the outside with the
// official SDK against real apiserver processes on Postgres.

// models.retrieve answers by id or alias with created from the models file;
// an unknown model and one outside the key's plan are 404 model_not_found.
func TestModelsRetrieve(t *testing.T) {
	t.Parallel()
	_, a, acc := freeAccount(t)
	c := client(a.URL+"/v1", acc.key)
	ctx := context.Background()
	for _, id := range []string{"svc-2-0", "svc-2.0"} {
		m, err := c.Models.Get(ctx, id)
		must(t, err)
		if m.ID != "svc-2-0" || m.Created != 1756684800 || m.OwnedBy != "svc" || m.Object != "model" {
			t.Fatalf("retrieve %s: %+v", id, m)
		}
	}
	page, err := c.Models.List(ctx)
	must(t, err)
	listed := false
	for _, m := range page.Data {
		listed = listed || (m.ID == "svc-2-0" && m.Created == 1756684800)
	}
	if !listed {
		t.Errorf("the list does not show svc-2-0 with created from the models file: %+v", page.Data)
	}
	for _, id := range []string{"nope", "svc-premium"} {
		_, err := c.Models.Get(ctx, id)
		var ae *openai.Error
		if !errors.As(err, &ae) || ae.StatusCode != 404 || ae.Code != "model_not_found" || ae.Type != "invalid_request_error" {
			t.Fatalf("retrieve %s: %v", id, err)
		}
	}
}

// Every answer carries x-request-id (the SDKs surface it) and the overhead
// headers, success and error alike.
func TestRequestIDAndOverheadHeaders(t *testing.T) {
	t.Parallel()
	_, a, acc := freeAccount(t)
	c := client(a.URL+"/v1", acc.key)
	check := func(name string, resp *http.Response) {
		t.Helper()
		if resp == nil {
			t.Fatalf("%s: no response", name)
		}
		if resp.Header.Get("X-Request-Id") == "" || resp.Header.Get("X-Svc-Overhead-Duration-Ms") == "" ||
			!strings.Contains(resp.Header.Get("Server-Timing"), "upstream;dur=") {
			t.Errorf("%s: headers %v", name, resp.Header)
		}
	}
	var resp *http.Response
	_, err := c.Chat.Completions.New(context.Background(), userMsg("hi"), option.WithResponseInto(&resp))
	must(t, err)
	check("completion", resp)
	_, err = c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "nope",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}}, option.WithResponseInto(&resp))
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 404 {
		t.Fatalf("unknown model: %v", err)
	}
	check("404", ae.Response)
	_, err = client(a.URL+"/v1", "svc_sk_bad").Models.List(context.Background())
	if !errors.As(err, &ae) || ae.StatusCode != 401 {
		t.Fatalf("bad key: %v", err)
	}
	check("401", ae.Response)
}

// Content parts, tool calls, response_format, n and logprobs pass through
// untouched both ways.
func TestWireFieldsPassThrough(t *testing.T) {
	t.Parallel()
	e, a, acc := freeAccount(t)
	c := client(a.URL+"/v1", acc.key)
	ctx := context.Background()
	logprobs := map[string]any{"content": []any{map[string]any{"token": "Hi", "logprob": -0.25, "bytes": []any{72.0, 105.0},
		"top_logprobs": []any{map[string]any{"token": "Hi", "logprob": -0.25, "bytes": []any{72.0, 105.0}}}}}, "refusal": nil}
	cases := []struct {
		name   string
		params openai.ChatCompletionNewParams
		reply  fakeupstream.Reply
		field  string // the request field that must reach the upstream as sent
		want   any
		check  func(*openai.ChatCompletion) error
	}{
		{name: "content parts", params: openai.ChatCompletionNewParams{Model: "svc-2-0", Messages: []openai.ChatCompletionMessageParamUnion{
			openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{openai.TextContentPart("look"),
				openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "https://example.test/cat.png"})})}},
			reply: fakeupstream.Reply{Text: "a cat"}, field: "messages",
			want: []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "look"},
				map[string]any{"type": "image_url", "image_url": map[string]any{"url": "https://example.test/cat.png"}}}}}},
		{name: "tool calls", params: openai.ChatCompletionNewParams{Model: "svc-2-0", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("weather?")},
			Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "weather",
				Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}})}},
			reply: fakeupstream.Reply{ToolCalls: []fakeupstream.ToolCall{{ID: "call_1", Name: "weather", Arguments: `{"city":"Oslo"}`}}},
			field: "tools", want: []any{map[string]any{"type": "function", "function": map[string]any{"name": "weather",
				"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}}},
			check: func(r *openai.ChatCompletion) error {
				tc := r.Choices[0].Message.ToolCalls
				if len(tc) != 1 || tc[0].ID != "call_1" || tc[0].Function.Name != "weather" || tc[0].Function.Arguments != `{"city":"Oslo"}` ||
					r.Choices[0].FinishReason != "tool_calls" {
					return fmt.Errorf("tool calls %+v", tc)
				}
				return nil
			}},
		{name: "response_format", params: openai.ChatCompletionNewParams{Model: "svc-2-0", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("json")},
			ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
				JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "answer", Strict: openai.Bool(true),
					Schema: map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "string"}}}}}}},
			reply: fakeupstream.Reply{Text: `{"a":"b"}`}, field: "response_format",
			want: map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "answer", "strict": true,
				"schema": map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "string"}}}}}},
		{name: "n", params: openai.ChatCompletionNewParams{Model: "svc-2-0", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("two")},
			N: openai.Int(2)}, reply: fakeupstream.Reply{Text: "one of two", N: 2}, field: "n", want: 2.0,
			check: func(r *openai.ChatCompletion) error {
				if len(r.Choices) != 2 || r.Choices[1].Index != 1 {
					return fmt.Errorf("choices %+v", r.Choices)
				}
				return nil
			}},
		{name: "logprobs", params: openai.ChatCompletionNewParams{Model: "svc-2-0", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("p")},
			Logprobs: openai.Bool(true), TopLogprobs: openai.Int(1)}, reply: fakeupstream.Reply{Text: "Hi", Logprobs: logprobs},
			field: "top_logprobs", want: 1.0,
			check: func(r *openai.ChatCompletion) error {
				lp := r.Choices[0].Logprobs.Content
				if len(lp) != 1 || lp[0].Token != "Hi" || lp[0].Logprob != -0.25 || len(lp[0].TopLogprobs) != 1 || len(lp[0].Bytes) != 2 {
					return fmt.Errorf("logprobs %+v", r.Choices[0].Logprobs)
				}
				return nil
			}},
	}
	for _, tc := range cases {
		e.upstream.Sequence(tc.reply)
		before := len(e.upstream.Requests())
		r, err := c.Chat.Completions.New(ctx, tc.params)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := e.upstream.Requests()[before].Body
		if !reflect.DeepEqual(got[tc.field], tc.want) {
			g, _ := json.Marshal(got[tc.field])
			w, _ := json.Marshal(tc.want)
			t.Errorf("%s: upstream got %s = %s, want %s", tc.name, tc.field, g, w)
		}
		if tc.name == "logprobs" && got["logprobs"] != true {
			t.Errorf("logprobs: upstream got logprobs %v", got["logprobs"])
		}
		if r.Model != "svc-2-0" || got["model"] != "up-2" {
			t.Errorf("%s: model %q to the client, %v upstream", tc.name, r.Model, got["model"])
		}
		if tc.check != nil {
			if err := tc.check(r); err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
		}
	}
}

// twoUpstreams: svc-2-0 served by deployments first/up-a then backup/up-b.
func twoUpstreams(t *testing.T, e *env, first, backup *fakeupstream.Server) {
	t.Helper()
	models := fmt.Sprintf(`providers:
  - {name: first, type: openai, base_url: %q, api_key_env: FAKE_UPSTREAM_KEY}
  - {name: backup, type: openai, base_url: %q, api_key_env: FAKE_UPSTREAM_KEY}
models:
  - {id: svc-2-0, display_name: "SVC 2.0", tier: standard, created: 2025-09-01,
     deployments: [{provider: first, upstream_model: up-a}, {provider: backup, upstream_model: up-b}],
     price: {input_per_mtok: 3, output_per_mtok: 15}}
`, first.BaseURL(), backup.BaseURL())
	must(t, os.WriteFile(e.models, []byte(models), 0o600))
}

type deploymentUsage struct{ Requests, PromptTokens, CompletionTokens, ReasoningTokens, CreditsMicro int64 }

func usageByDeployment(t *testing.T, e *env, workspace string) map[string]deploymentUsage {
	t.Helper()
	raw, _ := json.Marshal(e.admin("usage", "show", "--workspace", workspace)["byDeployment"])
	out := map[string]deploymentUsage{}
	must(t, json.Unmarshal(raw, &out))
	return out
}

// The fallback matrix: each failure of the first deployment before a byte
// reached the client moves the request to the backup; a stream that breaks
// after bytes were sent is never retried. Usage is metered once, exactly as
// the answering upstream reported it, to the deployment that answered.
func TestFallbackMatrix(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		fakeupstream.Condition
		wantFirst int // requests the first upstream sees for one plain and one streamed completion
	}{
		{name: "first down", Condition: fakeupstream.Condition{Down: true}, wantFirst: 0},
		{name: "first 500", Condition: fakeupstream.Condition{Reply: fakeupstream.Reply{Status: 500}}, wantFirst: 2},
		// The 429's Retry-After cools the first's only key: the second
		// request goes straight to the backup.
		{name: "first 429 with Retry-After", Condition: fakeupstream.Condition{Reply: fakeupstream.Reply{Status: 429, RetryAfter: "60"}}, wantFirst: 1},
		{name: "first stalls before headers", Condition: fakeupstream.Condition{Reply: fakeupstream.Reply{Stall: true}}, wantFirst: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			first, backup := fakeupstream.New(t), fakeupstream.New(t)
			twoUpstreams(t, e, first, backup)
			backup.Sequence(fakeupstream.Reply{Text: "from the backup", PromptTokens: 40, CompletionTokens: 7, ReasoningTokens: 3})
			tc.Condition.Apply(first)
			a := e.startAPI("SVC_UPSTREAM_TIMEOUT=1s")
			acc := e.account("free")
			c := client(a.URL+"/v1", acc.key)
			r, err := c.Chat.Completions.New(context.Background(), userMsg("plain"))
			must(t, err)
			if r.Choices[0].Message.Content != "from the backup" || r.Model != "svc-2-0" {
				t.Fatalf("plain answer %+v", r)
			}
			s := c.Chat.Completions.NewStreaming(context.Background(), userMsg("stream"))
			text := ""
			for s.Next() {
				if ch := s.Current(); len(ch.Choices) > 0 {
					text += ch.Choices[0].Delta.Content
				}
			}
			must(t, s.Err())
			if text != "from the backup" {
				t.Fatalf("streamed %q", text)
			}
			if n := len(first.Requests()); n != tc.wantFirst {
				t.Fatalf("the first upstream saw %d requests, want %d", n, tc.wantFirst)
			}
			if n := len(backup.Requests()); n != 2 || backup.Requests()[0].Body["model"] != "up-b" {
				t.Fatalf("the backup saw %d requests", n)
			}
			u := waitUsage(t, e, acc.workspace, 2)
			rep := backup.Reported()
			if u.requests != 2 || rep.Answers != 2 || u.prompt != rep.Prompt || u.completion != rep.Completion || u.reasoning != rep.Reasoning ||
				u.credits != 3*rep.Prompt+15*rep.Completion {
				t.Fatalf("metered %+v, the backup reported %+v", u, rep)
			}
			by := usageByDeployment(t, e, acc.workspace)
			if len(by) != 1 || by["backup/up-b"].Requests != 2 || by["backup/up-b"].PromptTokens != rep.Prompt {
				t.Fatalf("usage by deployment %+v", by)
			}
		})
	}
	t.Run("first fails mid-stream", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		first, backup := fakeupstream.New(t), fakeupstream.New(t)
		twoUpstreams(t, e, first, backup)
		first.Sequence(fakeupstream.Reply{Text: "one two three four", BreakMidStream: true, PromptTokens: 9, CompletionTokens: 9},
			fakeupstream.Reply{Text: "whole", PromptTokens: 21, CompletionTokens: 4, ReasoningTokens: 1})
		a := e.startAPI()
		acc := e.account("free")
		c := client(a.URL+"/v1", acc.key)
		s := c.Chat.Completions.NewStreaming(context.Background(), userMsg("stream"))
		text := ""
		for s.Next() {
			if ch := s.Current(); len(ch.Choices) > 0 {
				text += ch.Choices[0].Delta.Content
			}
		}
		if s.Err() == nil || !strings.HasPrefix(text, "one two") || strings.Contains(text, "four") {
			t.Fatalf("a stream cut mid-way ends in an error after its first bytes: %q, %v", text, s.Err())
		}
		if n := len(backup.Requests()); n != 0 {
			t.Fatalf("a stream that sent bytes was retried on the backup (%d requests)", n)
		}
		// The next request completes on the first deployment; only it is
		// metered (the broken stream reported no usage).
		_, err := c.Chat.Completions.New(context.Background(), userMsg("plain"))
		must(t, err)
		u := waitUsage(t, e, acc.workspace, 1)
		rep := first.Reported()
		if u.requests != 1 || rep.Answers != 1 || u.prompt != rep.Prompt || u.completion != rep.Completion {
			t.Fatalf("metered %+v, the first reported %+v", u, rep)
		}
		if by := usageByDeployment(t, e, acc.workspace); by["first/up-a"].Requests != 1 || len(by) != 1 {
			t.Fatalf("usage by deployment %+v", by)
		}
	})
}

// A provider's key pool is used round-robin; a key answering 429 is cooled
// down (the request moves to the next key) and /metrics counts requests and
// cooldowns by key name, never showing a key.
func TestKeyPoolRotationAndCooldown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	for _, k := range []string{"alpha", "beta"} {
		must(t, os.WriteFile(filepath.Join(dir, k), []byte(k+"-secret-value\n"), 0o600))
	}
	models := fmt.Sprintf(`providers:
  - {name: main, type: openai, base_url: %q, api_keys: [{name: alpha, file: %q}, {name: beta, file: %q}]}
models:
  - {id: svc-2-0, tier: standard, provider: main, upstream_model: up-2, price: {input_per_mtok: 3, output_per_mtok: 15}}
`, e.upstream.BaseURL(), filepath.Join(dir, "alpha"), filepath.Join(dir, "beta"))
	must(t, os.WriteFile(e.models, []byte(models), 0o600))
	var calls atomic.Int64
	e.upstream.Script(func(r fakeupstream.Request) fakeupstream.Reply {
		if calls.Add(1) == 5 {
			return fakeupstream.Reply{Status: 429, RetryAfter: "60"}
		}
		return fakeupstream.Reply{Text: "ok", PromptTokens: 5, CompletionTokens: 1}
	})
	a := e.startAPI()
	acc := e.account("free")
	c := client(a.URL+"/v1", acc.key)
	for range 7 {
		_, err := c.Chat.Completions.New(context.Background(), userMsg("x"))
		must(t, err)
	}
	var keys []string
	for _, r := range e.upstream.Requests() {
		keys = append(keys, strings.TrimSuffix(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), "-secret-value"))
	}
	// Round-robin, then alpha's 429 moves the request to beta and alpha
	// stays out of rotation.
	if got := strings.Join(keys, ","); got != "alpha,beta,alpha,beta,alpha,beta,beta,beta" {
		t.Fatalf("keys used %s", got)
	}
	resp, err := http.Get(a.URL + "/metrics")
	must(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	metrics := string(raw)
	for _, want := range []string{
		`svc_upstream_key_cooldowns_total{key="alpha",provider="main"} 1`,
		`svc_upstream_requests_total{deployment="main/up-2",key="alpha",outcome="rate_limited"} 1`,
		`svc_upstream_requests_total{deployment="main/up-2",key="alpha",outcome="ok"} 2`,
		`svc_upstream_requests_total{deployment="main/up-2",key="beta",outcome="ok"} 5`,
		`svc_upstream_fallbacks_total{model="svc-2-0"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(metrics, "secret-value") {
		t.Fatal("/metrics shows an upstream key")
	}
}
