package gateway

import (
	"encoding/json"

	"github.com/tidwall/gjson"

	"github.com/svc-dev/svc/apiserver/internal/metering"
)

// messagesStream encodes a chat-completions stream as Anthropic's event
// sequence: message_start, per content block content_block_start,
// content_block_delta… (text_delta | input_json_delta), content_block_stop,
// then message_delta (stop_reason, usage) and message_stop; an error event
// when the upstream's stream broke.
type messagesStream struct {
	msg     anthMessageObject
	started bool
	failed  bool
	block   int  // the open block's index, -1: none
	isText  bool // the open block is text (else tool_use)
	callIx  int  // the upstream's tool-call index of the open tool_use block
	next    int  // the next block's index
	finish  string
	usage   *chatUsage
}

func (messagesCodec) stream(x *exchange) streamEncoder {
	return &messagesStream{block: -1, msg: anthMessageObject{ID: newID("msg_"), Type: "message",
		Role: "assistant", Model: x.model.ID, Content: []any{}}}
}

func (m *messagesStream) send(s *sink, typ string, ev map[string]any) {
	ev["type"] = typ
	if b, err := json.Marshal(ev); err == nil {
		s.emit(typ, b)
	}
}

func (m *messagesStream) start(s *sink) {
	if !m.started {
		m.started = true
		m.send(s, "message_start", map[string]any{"message": m.msg})
	}
}

func (m *messagesStream) chunk(s *sink, payload []byte) *metering.Usage {
	var ch chatChunk
	if json.Unmarshal(payload, &ch) != nil {
		return nil
	}
	if len(ch.Error) > 0 {
		m.fail(s, gjson.GetBytes(ch.Error, "message").String())
		return nil
	}
	m.start(s)
	for _, c := range ch.Choices[:min(len(ch.Choices), 1)] {
		if c.FinishReason != "" {
			m.finish = c.FinishReason
		}
		if d := c.Delta.Content; d != "" {
			if m.block < 0 || !m.isText {
				m.open(s, true, map[string]any{"type": "text", "text": ""})
			}
			m.send(s, "content_block_delta", map[string]any{"index": m.block,
				"delta": map[string]string{"type": "text_delta", "text": d}})
		}
		for _, tc := range c.Delta.ToolCalls {
			ix := 0
			if tc.Index != nil {
				ix = *tc.Index
			}
			if m.block < 0 || m.isText || ix != m.callIx {
				m.callIx = ix
				m.open(s, false, map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Function.Name,
					"input": map[string]any{}})
			}
			if d := tc.Function.Arguments; d != "" {
				m.send(s, "content_block_delta", map[string]any{"index": m.block,
					"delta": map[string]string{"type": "input_json_delta", "partial_json": d}})
			}
		}
	}
	if ch.Usage != nil {
		m.usage = ch.Usage
		return usageOf(gjson.GetBytes(payload, "usage"))
	}
	return nil
}

// open closes the open block and starts the next one.
func (m *messagesStream) open(s *sink, text bool, block map[string]any) {
	m.close(s)
	m.block, m.isText = m.next, text
	m.next++
	m.send(s, "content_block_start", map[string]any{"index": m.block, "content_block": block})
}

func (m *messagesStream) close(s *sink) {
	if m.block >= 0 {
		m.send(s, "content_block_stop", map[string]any{"index": m.block})
		m.block = -1
	}
}

func (m *messagesStream) done(s *sink) {
	if m.failed {
		return
	}
	m.start(s)
	m.close(s)
	u := anthUsageOf(m.usage)
	reason := stopReason(m.finish)
	if reason == nil {
		r := "end_turn"
		reason = &r
	}
	m.send(s, "message_delta", map[string]any{"delta": map[string]any{"stop_reason": *reason, "stop_sequence": nil},
		"usage": u})
	m.send(s, "message_stop", map[string]any{})
}

func (m *messagesStream) fail(s *sink, msg string) {
	if m.failed {
		return
	}
	m.failed = true
	m.send(s, "error", map[string]any{"error": map[string]string{"type": "api_error", "message": msg}})
}
