package gateway

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"

	"github.com/svc-dev/svc/shared/wire"
)

// The internal chat-completions form as the translating codecs (Responses,
// Messages) read and write it. The chat codec never decodes these: it
// relays the upstream's bytes.

// chatMessage is one message of a chat-completions request.
type chatMessage struct {
	Role       string         `json:"role"`
	Content    any            `json:"content,omitempty"` // string or []chatPart
	ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

// chatPart is one content part; Raw, when set, is sent as is (a part the
// client wrote in the chat form already, cache_control hints included).
type chatPart map[string]any

type chatToolCall struct {
	Index    *int         `json:"index,omitempty"`
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function chatFunction `json:"function"`
}

type chatFunction struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// chatTool is a function tool of a chat-completions request.
type chatTool struct {
	Type     string          `json:"type"`
	Function chatToolFuncDef `json:"function"`
}

type chatToolFuncDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// chatCompletion is a non-streamed upstream answer.
type chatCompletion struct {
	ID      string `json:"id"`
	Created int64  `json:"created"`
	Choices []struct {
		FinishReason string `json:"finish_reason"`
		Message      struct {
			Content   *string        `json:"content"`
			Refusal   *string        `json:"refusal"`
			ToolCalls []chatToolCall `json:"tool_calls"`
		} `json:"message"`
	} `json:"choices"`
	Usage *chatUsage `json:"usage"`
}

// chatChunk is one upstream stream chunk.
type chatChunk struct {
	Choices []struct {
		FinishReason string `json:"finish_reason"`
		Delta        struct {
			Content   string         `json:"content"`
			Refusal   string         `json:"refusal"`
			ToolCalls []chatToolCall `json:"tool_calls"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *chatUsage      `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// chatUsage is the upstream's usage object.
type chatUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	TotalTokens         int64 `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
		// CacheWriteTokens: what some providers (Anthropic through an
		// OpenAI-compatible front) report as written to the cache.
		CacheWriteTokens int64 `json:"cache_write_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

// decodeCompletion reads a non-streamed upstream answer.
func decodeCompletion(raw []byte) (*chatCompletion, error) {
	var cc chatCompletion
	if err := json.Unmarshal(raw, &cc); err != nil {
		return nil, &wire.Error{Code: "upstream_error",
			Message: "The model provider answered with an unexpected completion.", Cause: err}
	}
	return &cc, nil
}

// newID is a fresh object id with prefix (resp_, msg_, …): 24 random hex
// digits.
func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// rawOr is v's JSON, or def when v is empty.
func rawOr(v json.RawMessage, def string) json.RawMessage {
	if len(v) == 0 {
		return json.RawMessage(def)
	}
	return v
}
