package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/shared/wire"
)

// upstreamToolSSE is a chat-completions stream with text, a tool call and
// the usage chunk.
const upstreamToolSSE = `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}

data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}

data: {"choices":[{"index":0,"delta":{"content":" there"}}]}

data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\""}}]}}]}

data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]}}]}

data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}

data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":2}}}

data: [DONE]

`

// recordEvents collects the events a relay writes.
type recordEvents struct {
	names    []string
	payloads []map[string]any
}

func (r *recordEvents) event(name string, payload []byte) error {
	var m map[string]any
	_ = json.Unmarshal(payload, &m)
	r.names = append(r.names, name)
	r.payloads = append(r.payloads, m)
	return nil
}

func exchangeFor(req *chatRequest) *exchange {
	return &exchange{req: req, model: catalog.Model{ID: "svc-2-0"}}
}

// TestStreamEncoders: the same upstream stream, encoded by each translating
// codec, is that format's event sequence with the usage at the end, and the
// usage found for metering is the upstream's.
func TestStreamEncoders(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		enc   streamEncoder
		want  string
		check func(t *testing.T, last map[string]any)
	}{
		{"responses", responsesCodec{}.stream(exchangeFor(&chatRequest{responses: &responsesRequest{}})),
			"response.created,response.in_progress,response.output_item.added,response.content_part.added," +
				"response.output_text.delta,response.output_text.delta,response.output_text.done,response.content_part.done," +
				"response.output_item.done,response.output_item.added,response.function_call_arguments.delta," +
				"response.function_call_arguments.delta,response.function_call_arguments.done,response.output_item.done," +
				"response.completed",
			func(t *testing.T, last map[string]any) {
				r := last["response"].(map[string]any)
				u := r["usage"].(map[string]any)
				out := r["output"].([]any)
				if r["status"] != "completed" || u["input_tokens"] != 7.0 || u["output_tokens"] != 3.0 ||
					u["input_tokens_details"].(map[string]any)["cached_tokens"] != 2.0 || len(out) != 2 ||
					out[1].(map[string]any)["arguments"] != `{"a":1}` || last["sequence_number"] != 14.0 {
					t.Fatalf("response.completed %v", last)
				}
			}},
		{"messages", messagesCodec{}.stream(exchangeFor(&chatRequest{messages: &messagesRequest{}})),
			"message_start,content_block_start,content_block_delta,content_block_delta,content_block_stop," +
				"content_block_start,content_block_delta,content_block_delta,content_block_stop,message_delta,message_stop",
			nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var rec recordEvents
			ended := 0
			u := relayWith(&rec, strings.NewReader(upstreamToolSSE), tc.enc, func() { ended++ })
			if got := strings.Join(rec.names, ","); got != tc.want {
				t.Fatalf("events\n got %s\nwant %s", got, tc.want)
			}
			if ended != 1 || u == nil || u.PromptTokens != 7 || u.CompletionTokens != 3 {
				t.Fatalf("ended %d, usage %+v", ended, u)
			}
			for i, p := range rec.payloads {
				if p["type"] != rec.names[i] {
					t.Fatalf("event %s has type %v", rec.names[i], p["type"])
				}
			}
			if tc.check != nil {
				tc.check(t, rec.payloads[len(rec.payloads)-1])
			}
		})
	}
	// Anthropic's message_delta carries the stop reason and the usage with
	// the cached tokens on their own.
	var rec recordEvents
	relayWith(&rec, strings.NewReader(upstreamToolSSE), messagesCodec{}.stream(exchangeFor(&chatRequest{})), func() {})
	md := rec.payloads[len(rec.payloads)-2]
	u := md["usage"].(map[string]any)
	if md["delta"].(map[string]any)["stop_reason"] != "tool_use" || u["input_tokens"] != 5.0 || u["cache_read_input_tokens"] != 2.0 {
		t.Fatalf("message_delta %v", md)
	}
}

// TestStreamEncodersBrokenUpstream: a stream cut before [DONE] ends in the
// format's failure event, once.
func TestStreamEncodersBrokenUpstream(t *testing.T) {
	t.Parallel()
	cut := upstreamToolSSE[:strings.Index(upstreamToolSSE, `data: {"choices":[{"index":0,"delta":{"tool_calls"`)]
	for name, enc := range map[string]streamEncoder{
		"response.failed": responsesCodec{}.stream(exchangeFor(&chatRequest{responses: &responsesRequest{}})),
		"error":           messagesCodec{}.stream(exchangeFor(&chatRequest{})),
	} {
		var rec recordEvents
		if u := relayWith(&rec, strings.NewReader(cut), enc, func() {}); u != nil {
			t.Fatalf("%s: usage from a cut stream: %+v", name, u)
		}
		if last := rec.names[len(rec.names)-1]; last != name || strings.Count(strings.Join(rec.names, ","), name) != 1 {
			t.Fatalf("%s: events %v", name, rec.names)
		}
	}
}

func decodeWith(cd codec, body string) (*chatRequest, map[string]any, error) {
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
	req, err := cd.decode(r, 1<<20)
	if err != nil {
		return nil, nil, err
	}
	var m map[string]any
	_ = json.Unmarshal(req.body, &m)
	return req, m, nil
}

// TestDecodeRefusals: what a codec cannot translate is a 400
// invalid_request_error naming the problem; nothing is sent upstream.
func TestDecodeRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cd         codec
		body, code string
	}{
		{responsesCodec{}, `{"model":"m","input":"x","previous_response_id":"resp_1"}`, "previous_response_not_supported"},
		{responsesCodec{}, `{"model":"m","input":"x","conversation":"conv_1"}`, "conversation_not_supported"},
		{responsesCodec{}, `{"model":"m","input":[{"type":"item_reference","id":"x"}]}`, "item_reference_not_supported"},
		{responsesCodec{}, `{"model":"m","input":"x","tools":[{"type":"file_search"}]}`, "unsupported_tool"},
		{responsesCodec{}, `{"model":"m","input":[]}`, "invalid_input"},
		{responsesCodec{}, `{"input":"x"}`, "invalid_model"},
		{messagesCodec{}, `{"model":"m","messages":[{"role":"user","content":"x"}]}`, "invalid_max_tokens"},
		{messagesCodec{}, `{"model":"m","max_tokens":5,"messages":[]}`, "invalid_messages"},
		{messagesCodec{}, `{"model":"m","max_tokens":5,"messages":[{"role":"system","content":"x"}]}`, "invalid_messages"},
		{messagesCodec{}, `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"document"}]}]}`, "invalid_messages"},
	} {
		_, _, err := decodeWith(tc.cd, tc.body)
		e, ok := err.(*wire.Error)
		if !ok || e.Status != 400 || e.Type != wire.TypeInvalidRequest || e.Code != tc.code {
			t.Errorf("%s: %v, want 400 %s", tc.body, err, tc.code)
		}
	}
}

// TestCacheHintsPassThrough: Anthropic cache_control on system and content
// blocks, and OpenAI prompt_cache_key, reach the chat-form body untouched.
func TestCacheHintsPassThrough(t *testing.T) {
	t.Parallel()
	_, m, err := decodeWith(messagesCodec{}, `{"model":"m","max_tokens":5,
		"system":[{"type":"text","text":"long doc","cache_control":{"type":"ephemeral","ttl":"1h"}}],
		"messages":[{"role":"user","content":[{"type":"text","text":"q","cache_control":{"type":"ephemeral"}}]}]}`)
	if err != nil {
		t.Fatal(err)
	}
	msgs := m["messages"].([]any)
	sys := msgs[0].(map[string]any)["content"].([]any)[0].(map[string]any)
	user := msgs[1].(map[string]any)["content"].([]any)[0].(map[string]any)
	if cc := sys["cache_control"].(map[string]any); cc["type"] != "ephemeral" || cc["ttl"] != "1h" {
		t.Errorf("system cache_control %v", sys)
	}
	if user["cache_control"].(map[string]any)["type"] != "ephemeral" {
		t.Errorf("user block cache_control %v", user)
	}
	_, m, err = decodeWith(responsesCodec{}, `{"model":"m","input":"x","prompt_cache_key":"k-1"}`)
	if err != nil || m["prompt_cache_key"] != "k-1" {
		t.Errorf("prompt_cache_key: %v %v", err, m)
	}
}
