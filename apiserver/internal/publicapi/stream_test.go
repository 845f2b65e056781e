package publicapi

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/apiserver/internal/catalog"
)

const upstreamSSE = `data: {"id":"c","model":"up","choices":[{"index":0,"delta":{"content":"hi"}}],"usage":null}

: a comment line

data: {"id":"c","model":"up","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"completion_tokens_details":{"reasoning_tokens":1}}}

data: [DONE]

`

func relay(t *testing.T, upstream string, wantUsage bool) (string, *int64) {
	t.Helper()
	e := echo.New()
	rec := httptest.NewRecorder()
	c := e.NewContext(httptest.NewRequest("POST", "/", nil), rec)
	ended := 0
	u := (&API{}).stream(c, strings.NewReader(upstream), catalog.Model{ID: "svc-2-0"}, wantUsage, func() { ended++ })
	if ended != 1 {
		t.Fatalf("the end of the stream was signalled %d times", ended)
	}
	if u == nil {
		return rec.Body.String(), nil
	}
	total := u.PromptTokens + u.CompletionTokens
	return rec.Body.String(), &total
}

func TestStreamRelay(t *testing.T) {
	t.Parallel()
	out, total := relay(t, upstreamSSE, false)
	if total == nil || *total != 10 {
		t.Fatalf("usage not captured: %v", total)
	}
	if strings.Contains(out, "usage") || strings.Contains(out, `"up"`) || !strings.Contains(out, `"model":"svc-2-0"`) {
		t.Fatalf("client stream without usage:\n%s", out)
	}
	if !strings.HasSuffix(out, "data: [DONE]\n\n") || strings.Count(out, "data: ") != 2 {
		t.Fatalf("want one chunk and [DONE]:\n%s", out)
	}

	out, _ = relay(t, upstreamSSE, true)
	if !strings.Contains(out, `"prompt_tokens":7`) {
		t.Fatalf("a client that asked keeps the usage chunk:\n%s", out)
	}

	cut := upstreamSSE[:strings.Index(upstreamSSE, "data: {\"id\":\"c\",\"model\":\"up\",\"choices\":[]")]
	out, total = relay(t, cut, false)
	if total != nil || !strings.Contains(out, `"code":"upstream_stream_error"`) || strings.Contains(out, "[DONE]") {
		t.Fatalf("a stream cut short ends in one error event and no usage:\n%s", out)
	}
}

// TestStreamRelayLongEvents: events longer than the initial scanner buffer
// (1 KiB) and than the old fixed one (64 KiB) are relayed byte for byte;
// only an event past the SSE line limit ends the stream in an error event.
func TestStreamRelayLongEvents(t *testing.T) {
	t.Parallel()
	chunk := func(content string) string {
		return `{"id":"c","model":"svc-2-0","choices":[{"index":0,"delta":{"content":"` + content + `"}}]}`
	}
	tests := []struct {
		name    string
		content []string
		tooLong bool
	}{
		{name: "short", content: []string{"a", "b"}},
		{name: "just over the initial buffer", content: []string{strings.Repeat("x", initialSSELine), "tail"}},
		{name: "over 64 KiB", content: []string{"head", strings.Repeat("y", 70<<10), "z"}},
		{name: "mixed", content: []string{strings.Repeat("m", 3000), "s", strings.Repeat("n", 9000), "t"}},
		{name: "past the line limit", content: []string{"ok", strings.Repeat("q", maxSSELine)}, tooLong: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var up, want strings.Builder
			for _, c := range tt.content {
				up.WriteString("data: " + strings.Replace(chunk(c), "svc-2-0", "up", 1) + "\n\n")
			}
			up.WriteString("data: [DONE]\n\n")
			for i, c := range tt.content {
				if tt.tooLong && i == len(tt.content)-1 {
					want.WriteString(`data: {"error":{"code":"upstream_stream_error","message":"The model provider sent an event larger than this server accepts.","type":"server_error"}}` + "\n\n")
					break
				}
				want.WriteString("data: " + chunk(c) + "\n\n")
			}
			if !tt.tooLong {
				want.WriteString("data: [DONE]\n\n")
			}
			got, _ := relay(t, up.String(), false)
			if got != want.String() {
				t.Fatalf("relayed stream differs (got %d bytes, want %d)\n got: %.300q\nwant: %.300q", len(got), len(want.String()), got, want.String())
			}
		})
	}
}
