package gateway

import (
	"encoding/json"
)

// anthMessageObject is an Anthropic message (the answer, and the message
// of message_start).
type anthMessageObject struct {
	ID           string    `json:"id"`
	Type         string    `json:"type"`
	Role         string    `json:"role"`
	Model        string    `json:"model"`
	Content      []any     `json:"content"`
	StopReason   *string   `json:"stop_reason"`
	StopSequence *string   `json:"stop_sequence"`
	Usage        anthUsage `json:"usage"`
}

// anthUsage is Anthropic's usage: input_tokens excludes the tokens read
// from or written to the cache, which are counted on their own.
type anthUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
}

type anthText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type anthToolUse struct {
	Type  string          `json:"type"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

func anthUsageOf(u *chatUsage) anthUsage {
	if u == nil {
		return anthUsage{}
	}
	cached, written := u.PromptTokensDetails.CachedTokens, u.PromptTokensDetails.CacheWriteTokens
	return anthUsage{InputTokens: max(u.PromptTokens-cached-written, 0), CacheReadInputTokens: cached,
		CacheCreationInputTokens: written, OutputTokens: u.CompletionTokens}
}

// stopReason is Anthropic's stop_reason for a chat finish_reason.
func stopReason(finish string) *string {
	r := "end_turn"
	switch finish {
	case "":
		return nil
	case "length":
		r = "max_tokens"
	case "tool_calls", "function_call":
		r = "tool_use"
	case "content_filter":
		r = "refusal"
	}
	return &r
}

// toolInput is a tool call's arguments as the tool_use input object
// ({} when the model sent no or invalid JSON).
func toolInput(args string) json.RawMessage {
	if args == "" || !json.Valid([]byte(args)) {
		return json.RawMessage("{}")
	}
	return json.RawMessage(args)
}

func (messagesCodec) answer(x *exchange, completion []byte) ([]byte, error) {
	cc, err := decodeCompletion(completion)
	if err != nil {
		return nil, err
	}
	m := anthMessageObject{ID: newID("msg_"), Type: "message", Role: "assistant", Model: x.model.ID,
		Content: []any{}, Usage: anthUsageOf(cc.Usage)}
	if len(cc.Choices) > 0 {
		ch := cc.Choices[0]
		if ch.Message.Content != nil && *ch.Message.Content != "" {
			m.Content = append(m.Content, anthText{Type: "text", Text: *ch.Message.Content})
		}
		if ch.Message.Refusal != nil && *ch.Message.Refusal != "" {
			m.Content = append(m.Content, anthText{Type: "text", Text: *ch.Message.Refusal})
		}
		for _, tc := range ch.Message.ToolCalls {
			m.Content = append(m.Content, anthToolUse{Type: "tool_use", ID: tc.ID, Name: tc.Function.Name,
				Input: toolInput(tc.Function.Arguments)})
		}
		m.StopReason = stopReason(ch.FinishReason)
	}
	return json.Marshal(m)
}
