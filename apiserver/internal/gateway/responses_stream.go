package gateway

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/svc-dev/svc/apiserver/internal/metering"
)

// responsesStream encodes a chat-completions stream as the Responses
// event sequence: response.created, response.in_progress, for each output
// item response.output_item.added … (response.content_part.added,
// response.output_text.delta…, response.output_text.done,
// response.content_part.done | response.function_call_arguments.delta…,
// response.function_call_arguments.done) … response.output_item.done,
// then response.completed with the usage (response.failed when the
// upstream's stream broke).
type responsesStream struct {
	resp    *responseObject
	seq     int64
	started bool
	// The open output item: a message (text != nil) or a function call.
	open   int // its output index, -1: none
	text   *strings.Builder
	msgID  string
	call   *functionCallItem
	callIx int // the upstream's tool-call index of call
	finish string
	usage  *chatUsage
}

func (responsesCodec) stream(x *exchange) streamEncoder {
	return &responsesStream{open: -1,
		resp: newResponse(x.req.responses, newID("resp_"), x.model.ID, "in_progress", time.Now().Unix())}
}

// send writes one event: its type and sequence number are set here.
func (r *responsesStream) send(s *sink, typ string, ev map[string]any) {
	ev["type"] = typ
	ev["sequence_number"] = r.seq
	r.seq++
	b, err := json.Marshal(ev)
	if err == nil {
		s.emit(typ, b)
	}
}

func (r *responsesStream) start(s *sink) {
	if r.started {
		return
	}
	r.started = true
	r.send(s, "response.created", map[string]any{"response": r.resp})
	r.send(s, "response.in_progress", map[string]any{"response": r.resp})
}

func (r *responsesStream) chunk(s *sink, payload []byte) *metering.Usage {
	var ch chatChunk
	if json.Unmarshal(payload, &ch) != nil {
		return nil
	}
	if len(ch.Error) > 0 {
		r.fail(s, gjson.GetBytes(ch.Error, "message").String())
		return nil
	}
	r.start(s)
	for _, c := range ch.Choices[:min(len(ch.Choices), 1)] {
		if c.FinishReason != "" {
			r.finish = c.FinishReason
		}
		if d := c.Delta.Content; d != "" {
			r.textDelta(s, d)
		}
		for _, tc := range c.Delta.ToolCalls {
			r.callDelta(s, tc)
		}
	}
	if ch.Usage != nil {
		r.usage = ch.Usage
		return usageOf(gjson.GetBytes(payload, "usage"))
	}
	return nil
}

func (r *responsesStream) textDelta(s *sink, d string) {
	if r.text == nil {
		r.closeItem(s)
		r.open, r.text, r.msgID = len(r.resp.Output), &strings.Builder{}, newID("msg_")
		r.resp.Output = append(r.resp.Output, nil) // filled when the item is done
		r.send(s, "response.output_item.added", map[string]any{"output_index": r.open,
			"item": messageItem{Type: "message", ID: r.msgID, Status: "in_progress", Role: "assistant", Content: []any{}}})
		r.send(s, "response.content_part.added", map[string]any{"item_id": r.msgID, "output_index": r.open,
			"content_index": 0, "part": newOutputText("")})
	}
	r.text.WriteString(d)
	r.send(s, "response.output_text.delta", map[string]any{"item_id": r.msgID, "output_index": r.open,
		"content_index": 0, "delta": d, "logprobs": []any{}})
}

func (r *responsesStream) callDelta(s *sink, tc chatToolCall) {
	ix := 0
	if tc.Index != nil {
		ix = *tc.Index
	}
	if r.call == nil || ix != r.callIx {
		r.closeItem(s)
		r.open, r.callIx = len(r.resp.Output), ix
		r.call = &functionCallItem{Type: "function_call", ID: newID("fc_"), CallID: tc.ID, Name: tc.Function.Name,
			Status: "in_progress"}
		r.resp.Output = append(r.resp.Output, nil)
		r.send(s, "response.output_item.added", map[string]any{"output_index": r.open, "item": *r.call})
	}
	if d := tc.Function.Arguments; d != "" {
		r.call.Arguments += d
		r.send(s, "response.function_call_arguments.delta", map[string]any{"item_id": r.call.ID,
			"output_index": r.open, "delta": d})
	}
}

// closeItem ends the open output item, if any.
func (r *responsesStream) closeItem(s *sink) {
	switch {
	case r.text != nil:
		text := r.text.String()
		base := map[string]any{"item_id": r.msgID, "output_index": r.open, "content_index": 0}
		r.send(s, "response.output_text.done", with(base, "text", text, "logprobs", []any{}))
		r.send(s, "response.content_part.done", with(base, "part", newOutputText(text)))
		item := messageItem{Type: "message", ID: r.msgID, Status: "completed", Role: "assistant",
			Content: []any{newOutputText(text)}}
		r.resp.Output[r.open] = item
		r.send(s, "response.output_item.done", map[string]any{"output_index": r.open, "item": item})
		r.text = nil
	case r.call != nil:
		r.call.Status = "completed"
		r.send(s, "response.function_call_arguments.done", map[string]any{"item_id": r.call.ID,
			"output_index": r.open, "name": r.call.Name, "arguments": r.call.Arguments})
		r.resp.Output[r.open] = *r.call
		r.send(s, "response.output_item.done", map[string]any{"output_index": r.open, "item": *r.call})
		r.call = nil
	}
	r.open = -1
}

// with is a copy of m with the key/value pairs kv added.
func with(m map[string]any, kv ...any) map[string]any {
	out := make(map[string]any, len(m)+len(kv)/2)
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i].(string)] = kv[i+1]
	}
	return out
}

func (r *responsesStream) done(s *sink) {
	if r.resp.Status == "failed" {
		return
	}
	r.start(s)
	r.closeItem(s)
	r.resp.finish(r.finish, r.usage)
	typ := "response.completed"
	if r.resp.Status == "incomplete" {
		typ = "response.incomplete"
	}
	r.send(s, typ, map[string]any{"response": r.resp})
}

func (r *responsesStream) fail(s *sink, msg string) {
	if r.resp.Status == "failed" {
		return
	}
	r.start(s)
	r.resp.Status = "failed"
	r.resp.Error = &responseError{Code: "server_error", Message: msg}
	// Items never finished are not part of the failed response.
	out := r.resp.Output[:0]
	for _, it := range r.resp.Output {
		if it != nil {
			out = append(out, it)
		}
	}
	r.resp.Output = out
	r.send(s, "response.failed", map[string]any{"response": r.resp})
}
