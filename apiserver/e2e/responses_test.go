package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/svc-dev/svc/shared/testenv/fakeupstream"
)

// TestResponsesAPIPlain: the official SDK's Responses API against /v1 and
// /api/v1: instructions, content parts, function calls and their outputs
// reach the chat-completions upstream translated; the answer's text, tool
// call and usage are what the SDK decodes; the request is metered.
func TestResponsesAPIPlain(t *testing.T) {
	t.Parallel()
	e, a, acc := freeAccount(t)
	e.upstream.Sequence(
		fakeupstream.Reply{Text: "the weather is fine", PromptTokens: 30, CompletionTokens: 5},
		fakeupstream.Reply{ToolCalls: []fakeupstream.ToolCall{{ID: "call_9", Name: "get_weather", Arguments: `{"city":"Oslo"}`}},
			PromptTokens: 12, CompletionTokens: 4})
	c := client(a.URL+"/v1", acc.key)
	callOut := responses.ResponseInputItemParamOfFunctionCallOutput("sunny, 21C")
	callOut.OfFunctionCallOutput.CallID = openai.String("call_1")
	params := responses.ResponseNewParams{
		Model:        "svc-2.0",
		Instructions: openai.String("Be brief."),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage(responses.ResponseInputMessageContentListParam{
				responses.ResponseInputContentParamOfInputText("What is the weather"),
				responses.ResponseInputContentParamOfInputText(" in Oslo?"),
			}, responses.EasyInputMessageRoleUser),
			responses.ResponseInputItemParamOfFunctionCall(`{"city":"Oslo"}`, "call_1", "get_weather"),
			callOut,
		}},
		Tools: []responses.ToolUnionParam{responses.ToolParamOfFunction("get_weather",
			map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}, true)},
		MaxOutputTokens: openai.Int(100),
		PromptCacheKey:  openai.String("tenant-7"),
	}
	resp, err := c.Responses.New(context.Background(), params)
	must(t, err)
	if resp.OutputText() != "the weather is fine" || resp.Model != "svc-2-0" || resp.Status != "completed" ||
		!strings.HasPrefix(resp.ID, "resp_") {
		t.Fatalf("decoded response: id %q model %q status %q text %q", resp.ID, resp.Model, resp.Status, resp.OutputText())
	}
	if u := resp.Usage; u.InputTokens != 30 || u.OutputTokens != 5 || u.TotalTokens != 35 {
		t.Errorf("usage %+v", u)
	}

	// What the upstream received: the chat form of the same conversation.
	b := e.upstream.Requests()[0].Body
	msgs := e.upstream.Requests()[0].Messages()
	if b["model"] != "up-2" || b["max_completion_tokens"] != 100.0 || b["prompt_cache_key"] != "tenant-7" || len(msgs) != 4 {
		t.Fatalf("upstream body %v", b)
	}
	if msgs[0]["role"] != "system" || msgs[0]["content"] != "Be brief." {
		t.Errorf("instructions → %v", msgs[0])
	}
	parts, _ := msgs[1]["content"].([]any)
	if msgs[1]["role"] != "user" || len(parts) != 2 || parts[1].(map[string]any)["text"] != " in Oslo?" {
		t.Errorf("user content parts → %v", msgs[1])
	}
	calls, _ := msgs[2]["tool_calls"].([]any)
	if msgs[2]["role"] != "assistant" || len(calls) != 1 || calls[0].(map[string]any)["id"] != "call_1" {
		t.Errorf("function_call → %v", msgs[2])
	}
	if msgs[3]["role"] != "tool" || msgs[3]["tool_call_id"] != "call_1" || msgs[3]["content"] != "sunny, 21C" {
		t.Errorf("function_call_output → %v", msgs[3])
	}
	tools, _ := b["tools"].([]any)
	if len(tools) != 1 || tools[0].(map[string]any)["function"].(map[string]any)["name"] != "get_weather" {
		t.Errorf("tools → %v", b["tools"])
	}

	// A function call comes back as a function_call output item.
	c2 := client(a.URL+"/api/v1", acc.key)
	resp, err = c2.Responses.New(context.Background(), responses.ResponseNewParams{Model: "svc-2-0",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("weather?")}})
	must(t, err)
	if len(resp.Output) != 1 {
		t.Fatalf("output %+v", resp.Output)
	}
	fc := resp.Output[0].AsFunctionCall()
	if fc.Type != "function_call" || fc.CallID != "call_9" || fc.Name != "get_weather" || fc.Arguments != `{"city":"Oslo"}` {
		t.Errorf("function call item %+v", fc)
	}
	if m := e.upstream.Requests()[1].Messages(); len(m) != 1 || m[0]["content"] != "weather?" {
		t.Errorf("string input → %v", m)
	}
	if u := waitUsage(t, e, acc.workspace, 2); u.requests != 2 || u.prompt != 42 || u.completion != 9 {
		t.Errorf("metered %+v, want 2 requests, 42 prompt and 9 completion tokens", u)
	}
}

// TestResponsesAPIStreaming: the SDK's streamed Responses call sees
// response.created first, the text as response.output_text.delta events,
// and response.completed last with the usage; the usage is metered.
func TestResponsesAPIStreaming(t *testing.T) {
	t.Parallel()
	e, a, acc := freeAccount(t)
	e.upstream.Sequence(fakeupstream.Reply{Text: "one two three", PromptTokens: 9, CompletionTokens: 3,
		ToolCalls: []fakeupstream.ToolCall{{ID: "call_2", Name: "lookup", Arguments: `{"q":"x"}`}}})
	c := client(a.URL+"/v1", acc.key)
	stream := c.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{Model: "svc-2-0",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("count")}})
	defer stream.Close()
	var types []string
	var text strings.Builder
	var final responses.Response
	var args string
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.function_call_arguments.done":
			args = ev.Arguments
		case "response.completed":
			final = ev.Response
		}
	}
	must(t, stream.Err())
	if len(types) < 3 || types[0] != "response.created" || types[1] != "response.in_progress" || types[len(types)-1] != "response.completed" {
		t.Fatalf("event sequence %v", types)
	}
	if text.String() != "one two three" || args != `{"q":"x"}` {
		t.Errorf("streamed text %q, arguments %q", text.String(), args)
	}
	if final.Usage.InputTokens != 9 || final.Usage.OutputTokens != 3 || final.OutputText() != "one two three" ||
		len(final.Output) != 2 || final.Output[1].AsFunctionCall().Name != "lookup" {
		t.Errorf("final response %+v", final)
	}
	if so, _ := e.upstream.Requests()[0].Body["stream_options"].(map[string]any); so["include_usage"] != true {
		t.Error("usage was not requested upstream")
	}
	if u := waitUsage(t, e, acc.workspace, 1); u.requests != 1 || u.prompt != 9 || u.completion != 3 {
		t.Errorf("metered %+v, want 1 request, 9 prompt and 3 completion tokens", u)
	}
}

// TestResponsesAPIRefusals: previous_response_id (we store no responses)
// and hosted tools are refused with a clear invalid_request_error, in
// OpenAI's envelope.
func TestResponsesAPIRefusals(t *testing.T) {
	t.Parallel()
	e, a, acc := freeAccount(t)
	for _, tc := range []struct{ body, code string }{
		{`{"model":"svc-2-0","input":"hi","previous_response_id":"resp_1"}`, "previous_response_not_supported"},
		{`{"model":"svc-2-0","input":"hi","tools":[{"type":"web_search"}]}`, "unsupported_tool"},
		{`{"model":"svc-2-0"}`, "invalid_input"},
		{`{"model":"nope","input":"hi"}`, "model_not_found"},
	} {
		resp, m := rawPost(t, a.URL+"/v1/responses", acc.key, "application/json", []byte(tc.body))
		typ, code := errFields(m)
		want := http.StatusBadRequest
		if tc.code == "model_not_found" {
			want = http.StatusNotFound
		}
		if resp.StatusCode != want || typ != "invalid_request_error" || code != tc.code {
			t.Errorf("%s: %d %s %s", tc.body, resp.StatusCode, typ, code)
		}
	}
	if n := len(e.upstream.Requests()); n != 0 {
		t.Errorf("refused requests reached the upstream %d times", n)
	}
}
