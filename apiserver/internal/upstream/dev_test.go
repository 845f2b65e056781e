package upstream

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestDevWriteScript(t *testing.T) {
	t.Parallel()
	tools := `"tools":[{"type":"function","function":{"name":"write_file"}}]`
	for _, tc := range []struct {
		name, body     string
		wantTool       bool
		wantArgs       string
		wantReplyParts []string
	}{
		{"write asks for the tool", `{"model":"m",` + tools + `,"messages":[{"role":"user","content":"write notes/a.txt: hello there"}]}`,
			true, `{"content":"hello there\n","path":"notes/a.txt"}`, nil},
		{"after the tool result", `{"model":"m",` + tools + `,"messages":[{"role":"user","content":"write a.txt: x"},` +
			`{"role":"assistant","content":null},{"role":"tool","content":"ok"}]}`, false, "", []string{DevLabel, "Wrote a.txt."}},
		// The tool refused the path: the reply says so, never "Wrote".
		{"after a refused write", `{"model":"m",` + tools + `,"messages":[{"role":"user","content":"write ../escape.txt: x"},` +
			`{"role":"assistant","content":null},{"role":"tool","content":"error: path refused: \"../escape.txt\" contains \"..\""}]}`,
			false, "", []string{DevLabel, `Could not write ../escape.txt: the write_file tool answered "error: path refused`}},
		{"no tools offered", `{"model":"m","messages":[{"role":"user","content":"write a.txt: x"}]}`,
			false, "", []string{"You said: write a.txt: x"}},
		{"not the script", `{"model":"m",` + tools + `,"messages":[{"role":"user","content":"hello"}]}`,
			false, "", []string{"You said: hello"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, "http://dev/chat/completions", strings.NewReader(tc.body))
			res, err := DevTransport{}.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			var out struct {
				Choices []struct {
					FinishReason string `json:"finish_reason"`
					Message      struct {
						Content   *string `json:"content"`
						ToolCalls []struct {
							Function struct{ Name, Arguments string } `json:"function"`
						} `json:"tool_calls"`
					} `json:"message"`
				} `json:"choices"`
			}
			if err := json.Unmarshal(b, &out); err != nil || len(out.Choices) != 1 {
				t.Fatalf("answer %s: %v", b, err)
			}
			c := out.Choices[0]
			if tc.wantTool {
				if c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 ||
					c.Message.ToolCalls[0].Function.Name != "write_file" || c.Message.ToolCalls[0].Function.Arguments != tc.wantArgs {
					t.Fatalf("want a write_file call with %s, got %s", tc.wantArgs, b)
				}
				return
			}
			if c.FinishReason != "stop" || c.Message.Content == nil {
				t.Fatalf("want a plain reply, got %s", b)
			}
			if strings.Contains(tc.body, `"role":"tool","content":"error`) && strings.Contains(*c.Message.Content, "Wrote") {
				t.Fatalf("a refused write reads as done: %q", *c.Message.Content)
			}
			for _, p := range tc.wantReplyParts {
				if !strings.Contains(*c.Message.Content, p) {
					t.Fatalf("reply %q lacks %q", *c.Message.Content, p)
				}
			}
		})
	}
}
