package gateway

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/shared/wire"
)

// Messages answers POST /messages in the Anthropic Messages wire format,
// translated to and from the chat-completions upstream (messagesCodec); see
// complete. Its errors are written in Anthropic's envelope (AnthropicErrors).
func (a *API) Messages(c echo.Context) error { return a.complete(c, messagesCodec{}) }

// messagesCodec is the Anthropic Messages API (POST /messages).
type messagesCodec struct{}

// messagesRequest is an Anthropic Messages request.
type messagesRequest struct {
	Model         string          `json:"model"`
	MaxTokens     *int64          `json:"max_tokens"`
	System        json.RawMessage `json:"system"`
	Messages      []anthMessage   `json:"messages"`
	Stream        *bool           `json:"stream"`
	StopSequences []string        `json:"stop_sequences"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	Tools         []anthTool      `json:"tools"`
	ToolChoice    *anthToolChoice `json:"tool_choice"`
	Metadata      *struct {
		UserID string `json:"user_id"`
	} `json:"metadata"`
}

type anthMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// anthBlock is one content block of a request.
type anthBlock struct {
	Type         string          `json:"type"`
	Text         string          `json:"text"`
	Source       *anthSource     `json:"source"`
	ID           string          `json:"id"`
	Name         string          `json:"name"`
	Input        json.RawMessage `json:"input"`
	ToolUseID    string          `json:"tool_use_id"`
	Content      json.RawMessage `json:"content"`
	IsError      bool            `json:"is_error"`
	CacheControl json.RawMessage `json:"cache_control"`
}

type anthSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
	URL       string `json:"url"`
}

type anthTool struct {
	Type         string          `json:"type,omitempty"`
	Name         string          `json:"name"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"input_schema"`
	CacheControl json.RawMessage `json:"cache_control,omitempty"`
}

type anthToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
}

func (messagesCodec) decode(r *http.Request, maxBody int64) (*chatRequest, error) {
	body, err := readJSONBody(r, maxBody)
	if err != nil {
		return nil, err
	}
	var in messagesRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, invalid("invalid_request", "The request does not match the Messages API: "+err.Error())
	}
	switch {
	case in.Model == "":
		return nil, invalid("invalid_model", "model: Field required")
	case in.MaxTokens == nil || *in.MaxTokens < 1:
		return nil, invalid("invalid_max_tokens", "max_tokens: Field required (a positive integer)")
	case len(in.Messages) == 0:
		return nil, invalid("invalid_messages", "messages: at least one message is required")
	}
	out := chatBody{Model: in.Model, MaxTokens: in.MaxTokens, Temperature: in.Temperature, TopP: in.TopP,
		Stop: in.StopSequences}
	if in.Stream != nil {
		out.Stream = *in.Stream
	}
	if in.Metadata != nil {
		out.User = in.Metadata.UserID
	}
	if sys, err := anthSystem(in.System); err != nil {
		return nil, err
	} else if sys != nil {
		out.Messages = append(out.Messages, *sys)
	}
	for _, m := range in.Messages {
		if out.Messages, err = anthTurn(out.Messages, m); err != nil {
			return nil, err
		}
	}
	for _, t := range in.Tools {
		if t.Type != "" && t.Type != "custom" {
			return nil, invalid("unsupported_tool", "Tools of type '"+t.Type+"' are not supported by this gateway; only client tools are.")
		}
		if t.Name == "" || len(t.InputSchema) == 0 {
			return nil, invalid("invalid_tools", "tools: each tool needs 'name' and 'input_schema'")
		}
		out.Tools = append(out.Tools, chatTool{Type: "function", Function: chatToolFuncDef{Name: t.Name,
			Description: t.Description, Parameters: t.InputSchema}})
	}
	if tc := in.ToolChoice; tc != nil {
		switch tc.Type {
		case "auto":
			out.ToolChoice = "auto"
		case "any":
			out.ToolChoice = "required"
		case "none":
			out.ToolChoice = "none"
		case "tool":
			out.ToolChoice = map[string]any{"type": "function", "function": map[string]string{"name": tc.Name}}
		default:
			return nil, invalid("invalid_tool_choice", "tool_choice.type must be auto, any, tool or none")
		}
		if tc.DisableParallelToolUse && len(out.Tools) > 0 {
			f := false
			out.ParallelToolCalls = &f
		}
	}
	chat, err := json.Marshal(out)
	if err != nil {
		return nil, wire.Internal(err)
	}
	req, err := parseChat(&chatRequest{body: chat})
	if err != nil {
		return nil, err
	}
	req.messages = &in
	return req, nil
}

// anthSystem is the system prompt as a chat system message: a string, or
// text blocks (kept as parts when one carries cache_control, so the hint
// reaches the upstream untouched).
func anthSystem(raw json.RawMessage) (*chatMessage, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return &chatMessage{Role: "system", Content: s}, nil
	}
	var blocks []anthBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, invalid("invalid_system", "system: must be a string or a list of text blocks")
	}
	parts, cached := make([]chatPart, 0, len(blocks)), false
	var b strings.Builder
	for _, bl := range blocks {
		if bl.Type != "text" {
			return nil, invalid("invalid_system", "system: only text blocks are allowed")
		}
		parts = append(parts, textPart(bl))
		b.WriteString(bl.Text)
		cached = cached || len(bl.CacheControl) > 0
	}
	if cached {
		return &chatMessage{Role: "system", Content: parts}, nil
	}
	return &chatMessage{Role: "system", Content: b.String()}, nil
}

// textPart is a text block as a chat content part, its cache_control kept.
func textPart(bl anthBlock) chatPart {
	p := chatPart{"type": "text", "text": bl.Text}
	if len(bl.CacheControl) > 0 {
		p["cache_control"] = bl.CacheControl
	}
	return p
}

// anthTurn appends the chat messages of one Anthropic turn: a user turn's
// tool_result blocks become tool messages (before the rest of the turn), an
// assistant turn's tool_use blocks its tool calls.
func anthTurn(msgs []chatMessage, m anthMessage) ([]chatMessage, error) {
	if m.Role != "user" && m.Role != "assistant" {
		return nil, invalid("invalid_messages", "messages: role must be 'user' or 'assistant'")
	}
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return append(msgs, chatMessage{Role: m.Role, Content: s}), nil
	}
	var blocks []anthBlock
	if err := json.Unmarshal(m.Content, &blocks); err != nil {
		return nil, invalid("invalid_messages", "messages: content must be a string or a list of content blocks")
	}
	var parts []chatPart
	var calls []chatToolCall
	for _, bl := range blocks {
		switch bl.Type {
		case "text":
			parts = append(parts, textPart(bl))
		case "image":
			if m.Role != "user" || bl.Source == nil {
				return nil, invalid("invalid_messages", "messages: image blocks belong to user turns and need a source")
			}
			url := bl.Source.URL
			if bl.Source.Type == "base64" {
				url = "data:" + bl.Source.MediaType + ";base64," + bl.Source.Data
			}
			parts = append(parts, chatPart{"type": "image_url", "image_url": map[string]string{"url": url}})
		case "tool_use":
			if m.Role != "assistant" {
				return nil, invalid("invalid_messages", "messages: tool_use blocks belong to assistant turns")
			}
			args := string(rawOr(bl.Input, "{}"))
			calls = append(calls, chatToolCall{ID: bl.ID, Type: "function", Function: chatFunction{Name: bl.Name, Arguments: args}})
		case "tool_result":
			if m.Role != "user" {
				return nil, invalid("invalid_messages", "messages: tool_result blocks belong to user turns")
			}
			text, err := anthResultText(bl)
			if err != nil {
				return nil, err
			}
			msgs = append(msgs, chatMessage{Role: "tool", ToolCallID: bl.ToolUseID, Content: text})
		case "thinking", "redacted_thinking":
			// Not sent back to a chat-completions upstream.
		default:
			return nil, invalid("invalid_messages", "messages: content blocks of type '"+bl.Type+"' are not supported by this gateway")
		}
	}
	if len(parts) == 0 && len(calls) == 0 {
		return msgs, nil
	}
	msg := chatMessage{Role: m.Role, ToolCalls: calls}
	if len(parts) > 0 {
		msg.Content = anthContent(parts)
	}
	return append(msgs, msg), nil
}

// anthContent is a turn's parts as chat content: text joined into a
// string, or the parts as they are when one is not plain text (an image, a
// cache_control hint).
func anthContent(parts []chatPart) any {
	var b strings.Builder
	for _, p := range parts {
		if p["type"] != "text" || p["cache_control"] != nil {
			return parts
		}
		b.WriteString(p["text"].(string))
	}
	return b.String()
}

// anthResultText is a tool_result's content as text.
func anthResultText(bl anthBlock) (string, error) {
	if len(bl.Content) == 0 {
		return "", nil
	}
	var s string
	if json.Unmarshal(bl.Content, &s) == nil {
		return s, nil
	}
	var blocks []anthBlock
	if err := json.Unmarshal(bl.Content, &blocks); err != nil {
		return "", invalid("invalid_messages", "messages: tool_result content must be a string or a list of blocks")
	}
	var b strings.Builder
	for _, x := range blocks {
		b.WriteString(x.Text)
	}
	return b.String(), nil
}

func (messagesCodec) name() string { return "anthropic.messages" }
