package gateway

import (
	"bytes"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/labstack/echo/v4"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

const upstreamSSE = `data: {"id":"c","model":"up","choices":[{"index":0,"delta":{"content":"hi"}}],"usage":null}

: a comment line

data: {"id":"c","model":"up","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"completion_tokens_details":{"reasoning_tokens":1}}}

data: [DONE]

`

func relay(t *testing.T, upstream string, wantUsage bool) (string, *int64) {
	t.Helper()
	return relayFrom(t, strings.NewReader(upstream), wantUsage)
}

func relayFrom(t *testing.T, upstream io.Reader, wantUsage bool) (string, *int64) {
	t.Helper()
	e := echo.New()
	rec := httptest.NewRecorder()
	c := e.NewContext(httptest.NewRequest("POST", "/", nil), rec)
	ended := 0
	u := (&API{}).stream(c, upstream, "svc-2-0", wantUsage, func() { ended++ })
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
			// However the upstream's bytes arrive (all at once, a byte at
			// a time, in halves, CRLF line ends), the output is the same.
			readers := map[string]func() io.Reader{
				"whole":    func() io.Reader { return strings.NewReader(up.String()) },
				"one byte": func() io.Reader { return iotest.OneByteReader(strings.NewReader(up.String())) },
				"halves":   func() io.Reader { return iotest.HalfReader(strings.NewReader(up.String())) },
				"crlf":     func() io.Reader { return strings.NewReader(strings.ReplaceAll(up.String(), "\n", "\r\n")) },
				"data+eof": func() io.Reader { return iotest.DataErrReader(strings.NewReader(up.String())) },
			}
			for name, r := range readers {
				if tt.tooLong && name == "one byte" {
					continue // 4 MiB a byte at a time: slow, and "halves" reads in small pieces too
				}
				got, _ := relayFrom(t, r(), false)
				if got != want.String() {
					t.Fatalf("%s: relayed stream differs (got %d bytes, want %d)\n got: %.300q\nwant: %.300q", name, len(got), len(want.String()), got, want.String())
				}
			}
		})
	}
}

// TestLineReader: lines as bufio.ScanLines splits them, however the bytes
// arrive; the buffer is held only while a line is incomplete.
func TestLineReader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []string
	}{
		{in: "", want: nil},
		{in: "a\n\nbc\n", want: []string{"a", "", "bc"}},
		{in: "a\r\n\r\nb\r\n", want: []string{"a", "", "b"}},
		{in: "a\nb", want: []string{"a", "b"}}, // the last line without a newline
		{in: strings.Repeat("x", 5000) + "\ny\n", want: []string{strings.Repeat("x", 5000), "y"}},
	}
	for _, tt := range tests {
		for _, wrap := range []func(io.Reader) io.Reader{func(r io.Reader) io.Reader { return r }, iotest.OneByteReader, iotest.HalfReader, iotest.DataErrReader} {
			var lr lineReader
			held, src := false, wrap(strings.NewReader(tt.in))
			lr.r = readFunc(func(p []byte) (int, error) {
				if lr.buf != nil && lr.start == lr.end {
					held = true // a read would wait holding a buffer with nothing pending
				}
				return src.Read(p)
			})
			got, err := readLines(&lr)
			if err != nil {
				t.Fatalf("%.20q: %v", tt.in, err)
			}
			if held {
				t.Fatalf("%.20q: read with a buffer held and nothing pending", tt.in)
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") || len(got) != len(tt.want) {
				t.Fatalf("%.20q: lines %q, want %q", tt.in, got, tt.want)
			}
		}
	}
}

// readLines reads lr to its end.
func readLines(lr *lineReader) ([]string, error) {
	var lines []string
	for {
		line, err := lr.next()
		if err == io.EOF {
			return lines, nil
		}
		if err != nil {
			return lines, err
		}
		lines = append(lines, string(line))
	}
}

type readFunc func([]byte) (int, error)

func (f readFunc) Read(p []byte) (int, error) { return f(p) }

// The model rewrite of a relayed chunk (in place, without sjson) writes
// exactly what sjson.SetRawBytes would.
func TestChatChunkModelRewrite(t *testing.T) {
	t.Parallel()
	for _, payload := range []string{
		`{"id":"c","model":"up","choices":[{"index":0,"delta":{"content":"hi"}}]}`,
		`{"model":"up","choices":[]}`,
		`{"choices":[{"delta":{"model":"inner"}}],"model" : "up-\"quoted\"" }`,
		`{"id":"c","model":null,"choices":[{"delta":{"content":"x"}}]}`,
		`{"id":"c","choices":[{"delta":{"content":"no model"}}]}`,
		`{"id":"c","model":"up","choices":[{"delta":{"content":"x"}}],"usage":{"prompt_tokens":1}}`,
		`{"id":"c","model":"up","choices":[{"delta":{"content":"x"}}],"usage":null}`,
		`{"usage":null,"id":"c","choices":[{"delta":{"content":"x"}}],"model":"up"}`,
		`{"id":"c","usage":null,"model":"up","choices":[{"delta":{"content":"x"}}]}`,
		`{ "usage" : null , "model" : "up" , "choices":[]}`,
		`{"model":"up","usage":null}`,
		`{"usage":null,"model":"up"}`,
		`{"usage":null,"choices":[{"delta":{}}]}`,
		`{"id":"c","us\u0061ge":null,"model":"up","choices":[{}]}`,
		`{"id":"c","usage":null,"m\u006fdel":"up","choices":[{}]}`,
		`{"model":"a","usage":null,"model":"b","choices":[{}]}`,
		`{"choices":[{"usage":1,"model":"inner"}],"usage":null,"model":"up"}`,
	} {
		for _, wantsUsage := range []bool{false, true} {
			enc := newChatStream("svc-2-0", wantsUsage)
			var got bytes.Buffer
			enc.chunk(&sink{w: eventFunc(func(_ string, p []byte) error { got.Write(p); return nil })}, []byte(payload))
			want := []byte(payload)
			if !wantsUsage && gjson.Get(payload, "usage").Exists() {
				want, _ = sjson.DeleteBytes(want, "usage")
			}
			if gjson.GetBytes(want, "model").Exists() {
				want, _ = sjson.SetRawBytes(want, "model", []byte(`"svc-2-0"`))
			}
			if got.String() != string(want) {
				t.Errorf("%s (usage %v):\n got %s\nwant %s", payload, wantsUsage, got.String(), want)
			}
		}
	}
}

type eventFunc func(name string, payload []byte) error

func (f eventFunc) event(name string, payload []byte) error { return f(name, payload) }
