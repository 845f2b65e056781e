// Package fakeupstream is an OpenAI-compatible chat-completions server for
// tests: the paid upstream model is the one part we cannot run here. It
// answers plain and streamed requests, reports usage (and remembers the total
// it reported, so metering can be checked exactly), scripts tool calls, and
// can fail, stall, or hold a stream open until the test releases it. The API
// server's tests run it as the upstream (Server); podagent's fake gateway
// mounts the same Upstream on its internal completions route.
package fakeupstream

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// ToolCall is a scripted function call in a reply.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string // JSON
}

// Reply is what the fake answers to one request.
type Reply struct {
	Status           int    // non-200: an error answer with this status
	Code             string // the error answer's code (default "fake")
	Text             string // assistant content
	ToolCalls        []ToolCall
	PromptTokens     int64
	CompletionTokens int64
	ReasoningTokens  int64
	// CachedTokens (read from the prompt cache) and CacheWriteTokens
	// (written to it) are reported in prompt_tokens_details; both are part
	// of PromptTokens.
	CachedTokens     int64
	CacheWriteTokens int64
	// Stall blocks before any header until the request is cancelled or the
	// server closes.
	Stall bool
	// Gate, when set, blocks before any answer until it is closed.
	Gate chan struct{}
	// Hold, for streams, blocks after the first chunk until closed.
	Hold chan struct{}
	// HoldFirst, for streams, sends the headers and blocks before the
	// first chunk until closed (a model slow to its first token).
	HoldFirst chan struct{}
	// BreakMidStream sends two chunks, then drops the connection.
	BreakMidStream bool
	// RetryAfter is a 429's Retry-After header (default "7").
	RetryAfter string
	// N answers with N identical choices (index 0..N-1; default 1).
	N int
	// Logprobs, when set, is each choice's logprobs object.
	Logprobs any
}

// Request is a received request.
type Request struct {
	Body   map[string]any
	Header http.Header
	Proto  string // "HTTP/1.1", "HTTP/2.0"
}

// Messages returns the request's messages.
func (r Request) Messages() []map[string]any {
	var out []map[string]any
	msgs, _ := r.Body["messages"].([]any)
	for _, m := range msgs {
		if mm, ok := m.(map[string]any); ok {
			out = append(out, mm)
		}
	}
	return out
}

// Upstream answers chat-completion requests by script.
type Upstream struct {
	mu       sync.Mutex
	script   func(Request) Reply
	requests []Request
	reported Usage // total usage reported in completed answers
	closing  chan struct{}
	once     sync.Once
}

// Usage totals.
type Usage struct{ Prompt, Completion, Reasoning, Cached, CacheWrite, Answers int64 }

// NewUpstream returns an Upstream that echoes the last user message.
func NewUpstream() *Upstream {
	u := &Upstream{closing: make(chan struct{})}
	u.script = u.defaultReply
	return u
}

// Release ends every answer still waiting on a gate, hold or stall.
func (u *Upstream) Release() { u.once.Do(func() { close(u.closing) }) }

// Server is a running fake upstream at /v1/chat/completions.
type Server struct {
	*httptest.Server
	*Upstream
}

// New starts a fake upstream over plain HTTP/1.1; it is closed with the test.
func New(t testing.TB) *Server {
	s := newServer()
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// NewTLS starts a fake upstream over HTTPS that negotiates HTTP/2, as real
// providers do; it is closed with the test. A client trusts it through
// CertPEM (for another process: a file named by SSL_CERT_FILE).
func NewTLS(t testing.TB) *Server {
	s := newServer()
	s.EnableHTTP2 = true
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

func newServer() *Server {
	u := NewUpstream()
	s := &Server{Upstream: u}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/chat/completions" {
			http.Error(w, `{"error":{"message":"not found","type":"invalid_request_error","code":"not_found"}}`, 404)
			return
		}
		u.ServeCompletion(w, req)
	}))
	return s
}

// CertPEM is the TLS server's certificate in PEM (nil for New's server).
func (s *Server) CertPEM() []byte {
	if s.Certificate() == nil {
		return nil
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
}

// Close releases waiting answers and stops the server (the upstream is then
// down: connections are refused).
func (s *Server) Close() {
	s.Upstream.Release()
	s.Server.CloseClientConnections()
	s.Server.Close()
}

// BaseURL is what to configure as SVC_UPSTREAM_BASE_URL.
func (s *Server) BaseURL() string { return s.URL + "/v1" }

// Script sets how requests are answered.
func (s *Upstream) Script(fn func(Request) Reply) {
	s.mu.Lock()
	s.script = fn
	s.mu.Unlock()
}

// Sequence scripts the answers in order; past the end it repeats the last.
func (s *Upstream) Sequence(replies ...Reply) {
	var mu sync.Mutex
	i := 0
	s.Script(func(Request) Reply {
		mu.Lock()
		defer mu.Unlock()
		r := replies[min(i, len(replies)-1)]
		i++
		return r
	})
}

// Requests returns the requests received so far.
func (s *Upstream) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Reported returns the usage the fake has reported in finished answers.
func (s *Upstream) Reported() Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reported
}

// defaultReply echoes the last user message; usage depends on the input so
// different requests report different numbers.
func (s *Upstream) defaultReply(r Request) Reply {
	msgs, _ := r.Body["messages"].([]any)
	last := ""
	for _, m := range msgs {
		if mm, ok := m.(map[string]any); ok && mm["role"] == "user" {
			last, _ = mm["content"].(string)
		}
	}
	return Reply{Text: "echo: " + last, PromptTokens: int64(11 + 3*len(msgs) + len(last)),
		CompletionTokens: int64(5 + len(strings.Fields(last))), ReasoningTokens: 2}
}

// ServeCompletion answers one chat-completion request (any path).
func (s *Upstream) ServeCompletion(w http.ResponseWriter, req *http.Request) {
	raw, _ := io.ReadAll(req.Body)
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		w.WriteHeader(400)
		fmt.Fprint(w, `{"error":{"message":"bad json","type":"invalid_request_error","code":"bad_json"}}`)
		return
	}
	r := Request{Body: body, Header: req.Header.Clone(), Proto: req.Proto}
	s.mu.Lock()
	s.requests = append(s.requests, r)
	script := s.script
	s.mu.Unlock()
	rep := script(r)

	if rep.Gate != nil {
		select {
		case <-rep.Gate:
		case <-req.Context().Done():
			return
		case <-s.closing:
			return
		}
	}
	if rep.Stall {
		select {
		case <-req.Context().Done():
		case <-s.closing:
		}
		return
	}
	if rep.Status != 0 && rep.Status != 200 {
		w.Header().Set("Content-Type", "application/json")
		if rep.Status == 429 {
			ra := rep.RetryAfter
			if ra == "" {
				ra = "7"
			}
			w.Header().Set("Retry-After", ra)
		}
		w.WriteHeader(rep.Status)
		code := rep.Code
		if code == "" {
			code = "fake"
		}
		fmt.Fprintf(w, `{"error":{"message":"fake upstream error %d","type":"server_error","code":%q}}`, rep.Status, code)
		return
	}
	model, _ := body["model"].(string)
	stream, _ := body["stream"].(bool)
	usage := map[string]any{"prompt_tokens": rep.PromptTokens, "completion_tokens": rep.CompletionTokens,
		"total_tokens":              rep.PromptTokens + rep.CompletionTokens,
		"completion_tokens_details": map[string]any{"reasoning_tokens": rep.ReasoningTokens}}
	if rep.CachedTokens != 0 || rep.CacheWriteTokens != 0 {
		usage["prompt_tokens_details"] = map[string]any{"cached_tokens": rep.CachedTokens,
			"cache_write_tokens": rep.CacheWriteTokens}
	}
	msg := map[string]any{"role": "assistant", "content": rep.Text}
	finish := "stop"
	if len(rep.ToolCalls) > 0 {
		finish = "tool_calls"
		calls := []any{}
		for i, tc := range rep.ToolCalls {
			calls = append(calls, map[string]any{"index": i, "id": tc.ID, "type": "function",
				"function": map[string]any{"name": tc.Name, "arguments": tc.Arguments}})
		}
		msg["tool_calls"] = calls
	}
	if !stream {
		choices := []any{}
		for i := range max(rep.N, 1) {
			ch := map[string]any{"index": i, "message": msg, "finish_reason": finish}
			if rep.Logprobs != nil {
				ch["logprobs"] = rep.Logprobs
			}
			choices = append(choices, ch)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "chatcmpl-fake", "object": "chat.completion",
			"created": time.Now().Unix(), "model": model, "usage": usage, "choices": choices})
		s.addReported(rep)
		return
	}
	s.streamReply(w, model, rep, msg, finish, usage, body)
}

func (s *Upstream) streamReply(w http.ResponseWriter, model string, rep Reply, msg map[string]any, finish string, usage map[string]any, body map[string]any) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	fl := w.(http.Flusher)
	includeUsage := false
	if so, ok := body["stream_options"].(map[string]any); ok {
		includeUsage, _ = so["include_usage"].(bool)
	}
	send := func(choices []any, u any) {
		c := map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": time.Now().Unix(),
			"model": model, "choices": choices}
		if includeUsage {
			c["usage"] = u
		}
		b, _ := json.Marshal(c)
		fmt.Fprintf(w, "data: %s\n\n", b)
		fl.Flush()
	}
	if rep.HoldFirst != nil {
		fl.Flush()
		select {
		case <-rep.HoldFirst:
		case <-s.closing:
			return
		}
	}
	send([]any{map[string]any{"index": 0, "delta": map[string]any{"role": "assistant", "content": ""}}}, nil)
	if rep.Hold != nil {
		select {
		case <-rep.Hold:
		case <-s.closing:
			return
		}
	}
	words := strings.Fields(rep.Text)
	for i, wd := range words {
		if i > 0 {
			wd = " " + wd
		}
		send([]any{map[string]any{"index": 0, "delta": map[string]any{"content": wd}}}, nil)
		if rep.BreakMidStream && i == 1 {
			panic(http.ErrAbortHandler) // drop the connection mid-stream
		}
	}
	if calls, ok := msg["tool_calls"].([]any); ok {
		send([]any{map[string]any{"index": 0, "delta": map[string]any{"tool_calls": calls}}}, nil)
	}
	send([]any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": finish}}, nil)
	if includeUsage {
		send([]any{}, usage)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	fl.Flush()
	if includeUsage {
		s.addReported(rep)
	}
}

func (s *Upstream) addReported(r Reply) {
	s.mu.Lock()
	s.reported.Prompt += r.PromptTokens
	s.reported.Completion += r.CompletionTokens
	s.reported.Reasoning += r.ReasoningTokens
	s.reported.Cached += r.CachedTokens
	s.reported.CacheWrite += r.CacheWriteTokens
	s.reported.Answers++
	s.mu.Unlock()
}
