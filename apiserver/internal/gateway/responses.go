package gateway

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/shared/wire"
)

// Responses answers POST /responses in the OpenAI Responses wire format,
// translated to and from the chat-completions upstream (responsesCodec);
// see complete. Responses are not stored: previous_response_id and
// conversation are refused (docs/gateway.md).
func (a *API) Responses(c echo.Context) error { return a.complete(c, responsesCodec{}) }

// responsesCodec is the OpenAI Responses API (POST /responses).
type responsesCodec struct{}

// responsesRequest is the part of a Responses request the translation
// reads; the answer echoes the request's settings as OpenAI's does.
type responsesRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	Stream             *bool           `json:"stream"`
	Tools              []responsesTool `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls"`
	MaxOutputTokens    *int64          `json:"max_output_tokens"`
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"top_p"`
	User               string          `json:"user"`
	Metadata           json.RawMessage `json:"metadata"`
	PromptCacheKey     string          `json:"prompt_cache_key"`
	SafetyIdentifier   string          `json:"safety_identifier"`
	ServiceTier        string          `json:"service_tier"`
	TopLogprobs        *int64          `json:"top_logprobs"`
	Text               json.RawMessage `json:"text"`
	Reasoning          json.RawMessage `json:"reasoning"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Conversation       json.RawMessage `json:"conversation"`
	Background         *bool           `json:"background"`
	Prompt             json.RawMessage `json:"prompt"`
}

type responsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// responsesItem is one item of a Responses input list.
type responsesItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

// responsesPart is one content part of a Responses message.
type responsesPart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	ImageURL string `json:"image_url"`
	Detail   string `json:"detail"`
	FileID   string `json:"file_id"`
	FileData string `json:"file_data"`
	Filename string `json:"filename"`
}

// chatBody is the chat-completions request a translating codec sends.
type chatBody struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	Stream              bool            `json:"stream,omitempty"`
	Tools               []chatTool      `json:"tools,omitempty"`
	ToolChoice          any             `json:"tool_choice,omitempty"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls,omitempty"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens,omitempty"`
	MaxTokens           *int64          `json:"max_tokens,omitempty"`
	Temperature         *float64        `json:"temperature,omitempty"`
	TopP                *float64        `json:"top_p,omitempty"`
	Stop                []string        `json:"stop,omitempty"`
	User                string          `json:"user,omitempty"`
	Metadata            json.RawMessage `json:"metadata,omitempty"`
	PromptCacheKey      string          `json:"prompt_cache_key,omitempty"`
	SafetyIdentifier    string          `json:"safety_identifier,omitempty"`
	ServiceTier         string          `json:"service_tier,omitempty"`
	TopLogprobs         *int64          `json:"top_logprobs,omitempty"`
	ResponseFormat      any             `json:"response_format,omitempty"`
	ReasoningEffort     string          `json:"reasoning_effort,omitempty"`
}

func invalid(code, msg string) *wire.Error { return wire.Coded(code, msg) }

func (responsesCodec) decode(r *http.Request, maxBody int64) (*chatRequest, error) {
	body, err := readJSONBody(r, maxBody)
	if err != nil {
		return nil, err
	}
	var in responsesRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, invalid("invalid_request", "The request does not match the Responses API: "+err.Error())
	}
	switch {
	case in.Model == "":
		return nil, invalid("invalid_model", "'model' is required and must be a non-empty string.")
	case in.PreviousResponseID != nil && *in.PreviousResponseID != "":
		return nil, invalid("previous_response_not_supported", "'previous_response_id' is not supported: this gateway "+
			"does not store responses. Send the whole conversation in 'input' (with store: false semantics).")
	case len(in.Conversation) > 0 && string(in.Conversation) != "null":
		return nil, invalid("conversation_not_supported", "'conversation' is not supported: this gateway does not store conversations.")
	case in.Background != nil && *in.Background:
		return nil, invalid("background_not_supported", "'background' responses are not supported: this gateway does not store responses.")
	case len(in.Prompt) > 0 && string(in.Prompt) != "null":
		return nil, invalid("prompt_not_supported", "Stored prompt templates ('prompt') are not supported.")
	}
	out := chatBody{Model: in.Model, ParallelToolCalls: in.ParallelToolCalls, MaxCompletionTokens: in.MaxOutputTokens,
		Temperature: in.Temperature, TopP: in.TopP, User: in.User, Metadata: in.Metadata, PromptCacheKey: in.PromptCacheKey,
		SafetyIdentifier: in.SafetyIdentifier, ServiceTier: in.ServiceTier, TopLogprobs: in.TopLogprobs}
	if in.Stream != nil {
		out.Stream = *in.Stream
	}
	if in.Instructions != nil && *in.Instructions != "" {
		out.Messages = append(out.Messages, chatMessage{Role: "system", Content: *in.Instructions})
	}
	if out.Messages, err = responsesInput(out.Messages, in.Input); err != nil {
		return nil, err
	}
	if out.Tools, err = responsesTools(in.Tools); err != nil {
		return nil, err
	}
	if out.ToolChoice, err = responsesToolChoice(in.ToolChoice); err != nil {
		return nil, err
	}
	if out.ResponseFormat, err = responsesFormat(in.Text); err != nil {
		return nil, err
	}
	if len(in.Reasoning) > 0 {
		var rs struct {
			Effort string `json:"effort"`
		}
		_ = json.Unmarshal(in.Reasoning, &rs)
		out.ReasoningEffort = rs.Effort
	}
	chat, err := json.Marshal(out)
	if err != nil {
		return nil, wire.Internal(err)
	}
	req, err := parseChat(&chatRequest{body: chat})
	if err != nil {
		return nil, err
	}
	req.responses, req.clientBody = &in, body
	return req, nil
}

// responsesInput appends the chat messages of a Responses input: a string
// (one user message) or a list of items.
func responsesInput(msgs []chatMessage, input json.RawMessage) ([]chatMessage, error) {
	if len(input) == 0 || string(input) == "null" {
		return nil, invalid("invalid_input", "'input' is required: a string or a list of input items.")
	}
	var s string
	if json.Unmarshal(input, &s) == nil {
		return append(msgs, chatMessage{Role: "user", Content: s}), nil
	}
	var items []responsesItem
	if err := json.Unmarshal(input, &items); err != nil || len(items) == 0 {
		return nil, invalid("invalid_input", "'input' must be a string or a non-empty list of input items.")
	}
	for i, it := range items {
		typ := it.Type
		if typ == "" && it.Role != "" {
			typ = "message"
		}
		switch typ {
		case "message":
			m, err := responsesMessage(it)
			if err != nil {
				return nil, err
			}
			msgs = append(msgs, m)
		case "function_call":
			if it.CallID == "" || it.Name == "" {
				return nil, invalid("invalid_input", "A function_call item needs 'call_id' and 'name'.")
			}
			tc := chatToolCall{ID: it.CallID, Type: "function", Function: chatFunction{Name: it.Name, Arguments: it.Arguments}}
			// Consecutive calls are one assistant turn with several calls.
			if n := len(msgs); n > 0 && msgs[n-1].Role == "assistant" && len(msgs[n-1].ToolCalls) > 0 && i > 0 && items[i-1].Type == "function_call" {
				msgs[n-1].ToolCalls = append(msgs[n-1].ToolCalls, tc)
			} else {
				msgs = append(msgs, chatMessage{Role: "assistant", ToolCalls: []chatToolCall{tc}})
			}
		case "function_call_output":
			if it.CallID == "" {
				return nil, invalid("invalid_input", "A function_call_output item needs 'call_id'.")
			}
			out, err := responsesOutputText(it.Output)
			if err != nil {
				return nil, err
			}
			msgs = append(msgs, chatMessage{Role: "tool", ToolCallID: it.CallID, Content: out})
		case "reasoning":
			// Reasoning items replayed by clients carry nothing a
			// chat-completions upstream reads.
		case "item_reference":
			return nil, invalid("item_reference_not_supported", "'item_reference' input items are not supported: this gateway does not store responses.")
		default:
			return nil, invalid("unsupported_input_item", "Input items of type '"+typ+"' are not supported by this gateway.")
		}
	}
	return msgs, nil
}

// responsesMessage translates a message item: its content is a string or
// a list of input_text / output_text / input_image / input_file parts.
func responsesMessage(it responsesItem) (chatMessage, error) {
	switch it.Role {
	case "user", "assistant", "system", "developer":
	default:
		return chatMessage{}, invalid("invalid_input", "A message item's 'role' must be user, assistant, system or developer.")
	}
	var s string
	if json.Unmarshal(it.Content, &s) == nil {
		return chatMessage{Role: it.Role, Content: s}, nil
	}
	var parts []responsesPart
	if err := json.Unmarshal(it.Content, &parts); err != nil {
		return chatMessage{}, invalid("invalid_input", "A message item's 'content' must be a string or a list of content parts.")
	}
	if it.Role != "user" {
		// Assistant, system and developer turns are text in the chat form.
		var b strings.Builder
		for _, p := range parts {
			switch p.Type {
			case "input_text", "output_text", "text":
				b.WriteString(p.Text)
			case "refusal":
			default:
				return chatMessage{}, invalid("invalid_input", "A "+it.Role+" message may hold only text parts, not '"+p.Type+"'.")
			}
		}
		return chatMessage{Role: it.Role, Content: b.String()}, nil
	}
	out := make([]chatPart, 0, len(parts))
	for _, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "text":
			out = append(out, chatPart{"type": "text", "text": p.Text})
		case "input_image":
			if p.ImageURL == "" {
				return chatMessage{}, invalid("invalid_input", "input_image parts need 'image_url' (file ids are not supported).")
			}
			img := map[string]any{"url": p.ImageURL}
			if p.Detail != "" {
				img["detail"] = p.Detail
			}
			out = append(out, chatPart{"type": "image_url", "image_url": img})
		case "input_file":
			f := map[string]any{}
			for k, v := range map[string]string{"file_id": p.FileID, "file_data": p.FileData, "filename": p.Filename} {
				if v != "" {
					f[k] = v
				}
			}
			out = append(out, chatPart{"type": "file", "file": f})
		default:
			return chatMessage{}, invalid("invalid_input", "Content parts of type '"+p.Type+"' are not supported.")
		}
	}
	return chatMessage{Role: it.Role, Content: out}, nil
}

// responsesOutputText is a function_call_output's output: a string, or
// text parts joined.
func responsesOutputText(raw json.RawMessage) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []responsesPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", invalid("invalid_input", "A function_call_output's 'output' must be a string or a list of text parts.")
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// responsesTools translates function tools; the hosted tools (web search,
// file search, computer use, …) have no chat-completions equivalent.
func responsesTools(tools []responsesTool) ([]chatTool, error) {
	out := make([]chatTool, 0, len(tools))
	for _, t := range tools {
		if t.Type != "function" {
			return nil, invalid("unsupported_tool", "Tools of type '"+t.Type+"' are not supported by this gateway; only 'function' tools are.")
		}
		if t.Name == "" {
			return nil, invalid("invalid_tools", "A function tool needs a 'name'.")
		}
		out = append(out, chatTool{Type: "function", Function: chatToolFuncDef{Name: t.Name, Description: t.Description,
			Parameters: t.Parameters, Strict: t.Strict}})
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// responsesToolChoice: "auto" / "none" / "required" as they are, a
// function choice in the chat form.
func responsesToolChoice(raw json.RawMessage) (any, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var tc struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if err := json.Unmarshal(raw, &tc); err != nil || tc.Type != "function" || tc.Name == "" {
		return nil, invalid("invalid_tool_choice", "'tool_choice' must be auto, none, required or {\"type\":\"function\",\"name\":…}.")
	}
	return map[string]any{"type": "function", "function": map[string]string{"name": tc.Name}}, nil
}

// responsesFormat translates text.format to response_format.
func responsesFormat(raw json.RawMessage) (any, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var t struct {
		Format *struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Schema      json.RawMessage `json:"schema"`
			Strict      *bool           `json:"strict"`
		} `json:"format"`
	}
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, invalid("invalid_text", "'text' must be an object with an optional 'format'.")
	}
	if t.Format == nil {
		return nil, nil
	}
	switch f := t.Format; f.Type {
	case "text", "":
		return nil, nil
	case "json_object":
		return map[string]string{"type": "json_object"}, nil
	case "json_schema":
		js := map[string]any{"name": f.Name, "schema": f.Schema}
		if f.Description != "" {
			js["description"] = f.Description
		}
		if f.Strict != nil {
			js["strict"] = *f.Strict
		}
		return map[string]any{"type": "json_schema", "json_schema": js}, nil
	}
	return nil, invalid("invalid_text", "'text.format.type' must be text, json_object or json_schema.")
}

func (responsesCodec) name() string { return "responses" }
