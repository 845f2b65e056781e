package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	anthoption "github.com/anthropics/anthropic-sdk-go/option"

	"github.com/svc-dev/svc/shared/testenv/fakeupstream"
)

// anthClient is the official Anthropic SDK pointed at the gateway: base is
// the server root (the SDK adds v1/messages) or root+"/api".
func anthClient(base, key string, opts ...anthoption.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]anthoption.RequestOption{anthoption.WithBaseURL(base + "/"),
		anthoption.WithAPIKey(key), anthoption.WithMaxRetries(0), anthoption.WithRequestTimeout(30 * time.Second),
		anthoption.WithMiddleware(func(req *http.Request, next anthoption.MiddlewareNext) (*http.Response, error) {
			return openAPIMiddleware(req, next)
		})}, opts...)...)
}

// TestMessagesAPIPlain: the Anthropic SDK (x-api-key and Bearer) against
// /v1/messages and /api/v1/messages: system, content blocks, tool_use and
// tool_result reach the upstream in the chat form; the text, tool_use,
// stop_reason and usage are what the SDK decodes; both are metered.
func TestMessagesAPIPlain(t *testing.T) {
	t.Parallel()
	e, a, acc := freeAccount(t)
	e.upstream.Sequence(
		fakeupstream.Reply{Text: "It is sunny.", PromptTokens: 40, CompletionTokens: 4},
		fakeupstream.Reply{ToolCalls: []fakeupstream.ToolCall{{ID: "call_5", Name: "get_weather", Arguments: `{"city":"Bergen"}`}},
			PromptTokens: 20, CompletionTokens: 6})
	c := anthClient(a.URL, acc.key)
	params := anthropic.MessageNewParams{
		Model:     "svc-2.0",
		MaxTokens: 256,
		System:    []anthropic.TextBlockParam{{Text: "You are terse."}},
		Messages: []anthropic.MessageParam{
			anthropic.NewUserMessage(anthropic.NewTextBlock("Weather in Oslo?")),
			anthropic.NewAssistantMessage(anthropic.NewToolUseBlock("toolu_1", map[string]any{"city": "Oslo"}, "get_weather")),
			anthropic.NewUserMessage(anthropic.NewToolResultBlock("toolu_1", "sunny", false), anthropic.NewTextBlock("Summarise.")),
		},
		Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "get_weather",
			InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}}}}},
	}
	var raw *http.Response
	msg, err := c.Messages.New(context.Background(), params, anthoption.WithResponseInto(&raw))
	must(t, err)
	// Anthropic's rate-limit headers, as the SDK hands them over.
	if h := raw.Header; h.Get("anthropic-ratelimit-requests-limit") != "1000" || h.Get("anthropic-ratelimit-requests-remaining") == "" ||
		h.Get("anthropic-ratelimit-tokens-limit") == "" || h.Get("anthropic-ratelimit-tokens-remaining") == "" || h.Get("RateLimit") == "" {
		t.Errorf("rate-limit headers %v", h)
	} else if _, err := time.Parse(time.RFC3339, h.Get("anthropic-ratelimit-requests-reset")); err != nil {
		t.Errorf("anthropic-ratelimit-requests-reset: %v", err)
	}
	if msg.Model != "svc-2-0" || msg.StopReason != anthropic.StopReasonEndTurn || len(msg.Content) != 1 ||
		msg.Content[0].Text != "It is sunny." || !strings.HasPrefix(msg.ID, "msg_") {
		t.Fatalf("decoded message %+v", msg)
	}
	if msg.Usage.InputTokens != 40 || msg.Usage.OutputTokens != 4 {
		t.Errorf("usage %+v", msg.Usage)
	}
	req := e.upstream.Requests()[0]
	msgs := req.Messages()
	if req.Body["model"] != "up-2" || req.Body["max_tokens"] != 256.0 || len(msgs) != 5 {
		t.Fatalf("upstream body %v", req.Body)
	}
	want := []string{"system", "user", "assistant", "tool", "user"}
	for i, m := range msgs {
		if m["role"] != want[i] {
			t.Fatalf("upstream roles: message %d is %v, want %s", i, m["role"], want[i])
		}
	}
	calls, _ := msgs[2]["tool_calls"].([]any)
	if len(calls) != 1 || calls[0].(map[string]any)["function"].(map[string]any)["arguments"] != `{"city":"Oslo"}` {
		t.Errorf("tool_use → %v", msgs[2])
	}
	if msgs[3]["tool_call_id"] != "toolu_1" || msgs[3]["content"] != "sunny" || msgs[4]["content"] != "Summarise." {
		t.Errorf("tool_result → %v then %v", msgs[3], msgs[4])
	}
	if tools, _ := req.Body["tools"].([]any); len(tools) != 1 {
		t.Errorf("tools → %v", req.Body["tools"])
	}
	if req.Header.Get("Authorization") != "Bearer upstream-secret" {
		t.Errorf("upstream auth %q", req.Header.Get("Authorization"))
	}

	// A tool call, through /api/v1 with the key as a bearer token.
	c2 := anthClient(a.URL+"/api", "", anthoption.WithAuthToken(acc.key))
	msg, err = c2.Messages.New(context.Background(), anthropic.MessageNewParams{Model: "svc-2-0", MaxTokens: 64,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Bergen?"))}})
	must(t, err)
	if msg.StopReason != anthropic.StopReasonToolUse || len(msg.Content) != 1 {
		t.Fatalf("tool answer %+v", msg)
	}
	tu := msg.Content[0].AsToolUse()
	if tu.ID != "call_5" || tu.Name != "get_weather" || string(tu.Input) != `{"city":"Bergen"}` {
		t.Errorf("tool_use block %+v", tu)
	}
	if u := waitUsage(t, e, acc.workspace, 2); u.requests != 2 || u.prompt != 60 || u.completion != 10 {
		t.Errorf("metered %+v, want 2 requests, 60 prompt and 10 completion tokens", u)
	}
}

// TestMessagesAPIStreaming: the SDK's stream sees message_start,
// content_block_start/delta/stop for the text and the tool_use,
// message_delta with stop_reason and usage, and message_stop; the
// accumulated message is the whole answer; the usage is metered.
func TestMessagesAPIStreaming(t *testing.T) {
	t.Parallel()
	e, a, acc := freeAccount(t)
	e.upstream.Sequence(fakeupstream.Reply{Text: "alpha beta", PromptTokens: 11, CompletionTokens: 7,
		ToolCalls: []fakeupstream.ToolCall{{ID: "call_7", Name: "lookup", Arguments: `{"q":"z"}`}}})
	c := anthClient(a.URL, acc.key)
	stream := c.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{Model: "svc-2-0", MaxTokens: 64,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("go"))}})
	defer stream.Close()
	var acc2 anthropic.Message
	var types []string
	var text strings.Builder
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		must(t, acc2.Accumulate(ev))
		if d, ok := ev.AsAny().(anthropic.ContentBlockDeltaEvent); ok && d.Delta.Type == "text_delta" {
			text.WriteString(d.Delta.Text)
		}
	}
	must(t, stream.Err())
	got := strings.Join(types, ",")
	wantSeq := "message_start,content_block_start,content_block_delta,content_block_delta,content_block_stop," +
		"content_block_start,content_block_delta,content_block_stop,message_delta,message_stop"
	if got != wantSeq {
		t.Fatalf("event sequence\n got %s\nwant %s", got, wantSeq)
	}
	if text.String() != "alpha beta" || acc2.StopReason != anthropic.StopReasonToolUse || len(acc2.Content) != 2 {
		t.Fatalf("accumulated %+v", acc2)
	}
	var in map[string]any
	_ = json.Unmarshal(acc2.Content[1].Input, &in)
	if acc2.Content[1].Name != "lookup" || in["q"] != "z" {
		t.Errorf("tool_use block %+v", acc2.Content[1])
	}
	if acc2.Usage.InputTokens != 11 || acc2.Usage.OutputTokens != 7 {
		t.Errorf("usage %+v", acc2.Usage)
	}
	if u := waitUsage(t, e, acc.workspace, 1); u.prompt != 11 || u.completion != 7 {
		t.Errorf("metered %+v", u)
	}
}

// TestMessagesAPIErrors: every refusal of the shared pipeline — 401, 403
// (tier), 404, 402 (with resets_at), 429 (with Retry-After), 400 — comes in
// Anthropic's envelope {type:"error", error:{type,message}} with the same
// status, and the SDK decodes it.
func TestMessagesAPIErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.startAPI()
	free, tiny, slow := e.account("free"), e.account("tiny"), e.account("slow")
	one := anthropic.MessageNewParams{Model: "svc-2-0", MaxTokens: 16,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("x"))}}
	tc0 := anthClient(a.URL, tiny.key)
	_, err := tc0.Messages.New(context.Background(), one)
	must(t, err)
	waitUsage(t, e, tiny.workspace, 1) // the tiny window is now spent

	for _, tc := range []struct {
		name, key, model string
		status           int
		typ              string
	}{
		{"bad key", "svc_sk_aaaaaaaaaaaa_" + strings.Repeat("b", 40), "svc-2-0", 401, "authentication_error"},
		{"unknown model", free.key, "gpt-4", 404, "not_found_error"},
		{"tier", free.key, "svc-premium", 403, "permission_error"},
		{"usage", tiny.key, "svc-2-0", 402, "billing_error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := one
			p.Model = anthropic.Model(tc.model)
			c := anthClient(a.URL, tc.key)
			_, err := c.Messages.New(context.Background(), p)
			var ae *anthropic.Error
			if !errors.As(err, &ae) {
				t.Fatalf("want an API error, got %v", err)
			}
			var body struct {
				Type  string `json:"type"`
				Error struct {
					Type, Message, ResetsAt string
				} `json:"error"`
			}
			_ = json.Unmarshal([]byte(ae.RawJSON()), &body)
			if ae.StatusCode != tc.status || body.Type != "error" || body.Error.Type != tc.typ || body.Error.Message == "" {
				t.Fatalf("got %d %s", ae.StatusCode, ae.RawJSON())
			}
			if tc.status == 402 && !strings.Contains(ae.RawJSON(), `"resets_at"`) {
				t.Errorf("402 without resets_at: %s", ae.RawJSON())
			}
		})
	}
	resp, m := rawPost(t, a.URL+"/v1/messages", free.key, "application/json", []byte(`{"model":"svc-2-0","messages":[]}`))
	if e2, _ := m["error"].(map[string]any); resp.StatusCode != 400 || m["type"] != "error" || e2["type"] != "invalid_request_error" {
		t.Errorf("missing max_tokens: %d %v", resp.StatusCode, m)
	}

	c := anthClient(a.URL, slow.key)
	for i := 0; i < 10; i++ {
		_, err := c.Messages.New(context.Background(), one)
		if err == nil {
			continue
		}
		var ae *anthropic.Error
		if !errors.As(err, &ae) || ae.StatusCode != 429 || !strings.Contains(ae.RawJSON(), `"rate_limit_error"`) {
			t.Fatalf("want 429 rate_limit_error, got %v", err)
		}
		if ae.Response.Header.Get("Retry-After") == "" || i < 3 {
			t.Fatalf("refusal after %d requests, Retry-After %q", i, ae.Response.Header.Get("Retry-After"))
		}
		return
	}
	t.Fatal("10 requests were admitted on a plan of 3 per minute")
}
