package upstream

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// DevLabel is how the dev provider names itself in every reply, so nobody
// mistakes it for a model.
const DevLabel = "[dev upstream: no model behind this reply]"

// DevTransport answers chat completions deterministically without a network:
// the reply repeats the last user message. Token counts are derived from text
// length (prompt: characters/4 over all messages; completion: one per word).
//
// One script lets `make run` show a turn that changes files: when the
// request offers the write_file tool and the last message is the user's
// "write <path>: <text>", the answer is a write_file call with that path and
// text; once the tool's result comes back, the reply says what was written.
type DevTransport struct{}

type devRequest struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role    string `json:"role"`
		Content any    `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
}

// DevWritePrefix starts the dev provider's one script (see DevTransport).
const DevWritePrefix = "write "

// devWrite parses "write <path>: <text>".
func devWrite(msg string) (path, text string, ok bool) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(msg), DevWritePrefix)
	if !ok {
		return "", "", false
	}
	path, text, ok = strings.Cut(rest, ":")
	path = strings.TrimSpace(path)
	return path, strings.TrimSpace(text), ok && path != ""
}

func (dr *devRequest) offers(tool string) bool {
	for _, t := range dr.Tools {
		if t.Function.Name == tool {
			return true
		}
	}
	return false
}

// RoundTrip implements http.RoundTripper.
func (DevTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	defer req.Body.Close()
	var dr devRequest
	if err := json.NewDecoder(req.Body).Decode(&dr); err != nil {
		return devResponse(http.StatusBadRequest, "application/json",
			`{"error":{"message":"dev upstream: bad JSON","type":"invalid_request_error","code":"bad_json"}}`), nil
	}
	chars, last := 0, ""
	for _, m := range dr.Messages {
		s := contentText(m.Content)
		chars += len(s)
		if m.Role == "user" {
			last = s
		}
	}
	reply := DevLabel + " You said: " + last
	lastRole, toolAnswer := "", ""
	if n := len(dr.Messages); n > 0 {
		lastRole = dr.Messages[n-1].Role
		toolAnswer = strings.TrimSpace(contentText(dr.Messages[n-1].Content))
	}
	path, text, script := devWrite(last)
	script = script && !dr.Stream && dr.offers("write_file")
	if script && lastRole == "tool" {
		// Report what the tool answered: a refused write (a path outside
		// the workspace) must not read as done.
		if strings.HasPrefix(toolAnswer, "error") {
			reply = DevLabel + " Could not write " + path + ": the write_file tool answered \"" + toolAnswer + "\"."
		} else {
			reply = DevLabel + " Wrote " + path + "."
		}
	}
	words := strings.Fields(reply)
	usage := map[string]any{"prompt_tokens": chars/4 + 1, "completion_tokens": len(words),
		"total_tokens": chars/4 + 1 + len(words), "completion_tokens_details": map[string]any{"reasoning_tokens": 0}}
	id, created := "chatcmpl-dev", time.Now().Unix()
	if script && lastRole == "user" {
		args, _ := json.Marshal(map[string]string{"path": path, "content": text + "\n"})
		body, _ := json.Marshal(map[string]any{
			"id": id, "object": "chat.completion", "created": created, "model": dr.Model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "tool_calls",
				"message": map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
					"id": "call_dev_1", "type": "function",
					"function": map[string]any{"name": "write_file", "arguments": string(args)}}}}}},
			"usage": usage,
		})
		return devResponse(http.StatusOK, "application/json", string(body)), nil
	}
	if !dr.Stream {
		body, _ := json.Marshal(map[string]any{
			"id": id, "object": "chat.completion", "created": created, "model": dr.Model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
				"message": map[string]any{"role": "assistant", "content": reply}}},
			"usage": usage,
		})
		return devResponse(http.StatusOK, "application/json", string(body)), nil
	}
	var b strings.Builder
	chunk := func(delta map[string]any, finish any, u any) {
		choices := []any{}
		if delta != nil {
			choices = append(choices, map[string]any{"index": 0, "delta": delta, "finish_reason": finish})
		}
		j, _ := json.Marshal(map[string]any{"id": id, "object": "chat.completion.chunk", "created": created,
			"model": dr.Model, "choices": choices, "usage": u})
		fmt.Fprintf(&b, "data: %s\n\n", j)
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil, nil)
	for i, w := range words {
		if i > 0 {
			w = " " + w
		}
		chunk(map[string]any{"content": w}, nil, nil)
	}
	chunk(map[string]any{}, "stop", nil)
	chunk(nil, nil, usage)
	b.WriteString("data: [DONE]\n\n")
	return devResponse(http.StatusOK, "text/event-stream", b.String()), nil
}

func devResponse(status int, ctype, body string) *http.Response {
	return &http.Response{
		StatusCode: status, Status: http.StatusText(status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {ctype}, "X-Svc-Upstream": {"dev"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
	}
}

// contentText is a message's text: the string, or the text parts of an
// array of content parts joined by spaces.
func contentText(c any) string {
	switch v := c.(type) {
	case string:
		return v
	case []any:
		var parts []string
		for _, p := range v {
			if m, ok := p.(map[string]any); ok && m["type"] == "text" {
				if t, ok := m["text"].(string); ok {
					parts = append(parts, t)
				}
			}
		}
		return strings.Join(parts, " ")
	}
	return ""
}
