// Package fakegateway stands in for the API's internal routes in podagent
// tests: POST /internal/projects/{id}/chat/completions answers like
// apiserver/internal/fakeupstream (the same Reply/ToolCall scripting, which
// podagent cannot import across modules) after checking the runtime token,
// GET /internal/projects/{id}/channel serves a settable channel config and
// POST /internal/projects/{id}/checkpoints/record keeps checkpoint rows.
package fakegateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/wire"
)

// ToolCall is a scripted function call in a reply.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string // JSON
}

// Reply is what the fake answers to one completion request.
type Reply struct {
	Status    int // non-200: an error envelope with this status
	Code      string
	Text      string
	ToolCalls []ToolCall
	// Hold blocks the answer until closed (or the request ends).
	Hold chan struct{}
}

// Request is a received completion request.
type Request struct {
	Body   map[string]any
	Header http.Header
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

// Server is a running fake gateway.
type Server struct {
	*httptest.Server
	ProjectID, Token string

	mu          sync.Mutex
	script      func(Request) Reply
	requests    []Request
	channel     wire.ChannelConfig
	channelErr  int
	channelHits int
	records     map[string]wire.CheckpointRecord
}

// New starts a fake gateway for one project; it is closed with the test.
func New(t testing.TB, projectID, token string) *Server {
	s := &Server{ProjectID: projectID, Token: token}
	s.script = func(r Request) Reply {
		msgs := r.Messages()
		last, _ := msgs[len(msgs)-1]["content"].(string)
		return Reply{Text: "echo: " + last}
	}
	s.Server = httptest.NewServer(http.HandlerFunc(s.handle))
	t.Cleanup(s.Server.Close)
	return s
}

// Script sets how completion requests are answered.
func (s *Server) Script(fn func(Request) Reply) {
	s.mu.Lock()
	s.script = fn
	s.mu.Unlock()
}

// Sequence scripts the answers in order; past the end it repeats the last.
func (s *Server) Sequence(replies ...Reply) {
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

// Requests returns the completion requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// SetChannel sets the channel config served; status != 0 answers that
// error status instead.
func (s *Server) SetChannel(c wire.ChannelConfig, status int) {
	s.mu.Lock()
	s.channel, s.channelErr = c, status
	s.mu.Unlock()
}

// Records returns the checkpoint rows recorded (idempotent on commitSha).
func (s *Server) Records() []wire.CheckpointRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []wire.CheckpointRecord
	for _, r := range s.records {
		out = append(out, r)
	}
	return out
}

// ChannelHits is the number of channel config requests served.
func (s *Server) ChannelHits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.channelHits
}

func writeErr(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"error":{"message":"fake gateway: %s","type":"server_error","code":%q}}`, code, code)
}

func (s *Server) handle(w http.ResponseWriter, req *http.Request) {
	prefix := "/internal/projects/" + s.ProjectID + "/"
	rest, ok := strings.CutPrefix(req.URL.Path, prefix)
	if !ok {
		writeErr(w, 404, "not_found")
		return
	}
	if req.Header.Get("Authorization") != "Bearer "+s.Token {
		writeErr(w, 401, "invalid_runtime_token")
		return
	}
	switch {
	case rest == "channel" && req.Method == http.MethodGet:
		s.mu.Lock()
		s.channelHits++
		c, st := s.channel, s.channelErr
		s.mu.Unlock()
		if st != 0 {
			writeErr(w, st, "channel_error")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(c)
	case rest == "chat/completions" && req.Method == http.MethodPost:
		s.completion(w, req)
	case rest == "checkpoints/record" && req.Method == http.MethodPost:
		var rec wire.CheckpointRecord
		if err := json.NewDecoder(req.Body).Decode(&rec); err != nil || rec.CommitSHA == "" {
			writeErr(w, 400, "bad_record")
			return
		}
		s.mu.Lock()
		if s.records == nil {
			s.records = map[string]wire.CheckpointRecord{}
		}
		_, existed := s.records[rec.CommitSHA]
		s.records[rec.CommitSHA] = rec
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(wire.CheckpointRecordResponse{ID: "ckpt_" + rec.CommitSHA[:min(8, len(rec.CommitSHA))], Created: !existed})
	default:
		writeErr(w, 404, "not_found")
	}
}

func (s *Server) completion(w http.ResponseWriter, req *http.Request) {
	var body map[string]any
	if err := json.NewDecoder(req.Body).Decode(&body); err != nil {
		writeErr(w, 400, "bad_json")
		return
	}
	r := Request{Body: body, Header: req.Header.Clone()}
	s.mu.Lock()
	s.requests = append(s.requests, r)
	script := s.script
	s.mu.Unlock()
	rep := script(r)
	if rep.Hold != nil {
		select {
		case <-rep.Hold:
		case <-req.Context().Done():
			return
		}
	}
	if rep.Status != 0 && rep.Status != 200 {
		code := rep.Code
		if code == "" {
			code = "fake"
		}
		writeErr(w, rep.Status, code)
		return
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
		msg["content"] = nil
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": "chatcmpl-fake", "object": "chat.completion",
		"created": time.Now().Unix(), "model": body["model"],
		"usage":   map[string]any{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}}})
}
