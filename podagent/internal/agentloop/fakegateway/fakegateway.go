// Package fakegateway stands in for the API's internal routes in podagent
// tests: POST /internal/projects/{id}/chat/completions is answered by
// shared/testenv/fakeupstream (the same Reply/ToolCall scripting the API's
// tests use) after checking the runtime token,
// GET /internal/projects/{id}/channel serves a settable channel config and
// POST /internal/projects/{id}/checkpoints/record keeps checkpoint rows and
// POST /internal/projects/{id}/webhook/attempts callback attempt records
// (or answers 503 while SetAttemptsDown).
package fakegateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/testenv/fakeupstream"
	"github.com/svc-dev/svc/shared/wire"
)

// The completion scripting is shared/testenv/fakeupstream's, the fake the
// API server's tests use as their upstream.
type (
	ToolCall = fakeupstream.ToolCall
	Reply    = fakeupstream.Reply
	Request  = fakeupstream.Request
)

// Server is a running fake gateway.
type Server struct {
	*httptest.Server
	*fakeupstream.Upstream
	ProjectID, Token string

	mu          sync.Mutex
	channel     wire.ChannelConfig
	channelErr  int
	channelHits int
	records     map[string]wire.CheckpointRecord
	outbox      map[string]wire.OutboxPut // by correlation id
	// attempts: times each attempt id was taken; attemptsDown answers
	// 503 and keeps the ids seen in attemptsRefused.
	attempts        map[string]int
	attemptsDown    bool
	attemptsRefused map[string]bool
}

// New starts a fake gateway for one project; it is closed with the test.
func New(t testing.TB, projectID, token string) *Server {
	s := &Server{ProjectID: projectID, Token: token, Upstream: fakeupstream.NewUpstream(),
		records: map[string]wire.CheckpointRecord{}, outbox: map[string]wire.OutboxPut{},
		attempts: map[string]int{}, attemptsRefused: map[string]bool{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.handle))
	t.Cleanup(func() {
		s.Upstream.Release()
		s.Server.CloseClientConnections()
		s.Server.Close()
	})
	return s
}

// Close releases waiting answers and stops the server.
func (s *Server) Close() {
	s.Upstream.Release()
	s.Server.Close()
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

// Outbox returns the messages the pod handed to POST .../outbox, by
// correlation id (idempotent, as the API's).
func (s *Server) Outbox() map[string]wire.OutboxPut {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]wire.OutboxPut, len(s.outbox))
	for k, v := range s.outbox {
		out[k] = v
	}
	return out
}

// SetAttemptsDown makes POST .../webhook/attempts answer 503 (down) or take
// the records again.
func (s *Server) SetAttemptsDown(down bool) {
	s.mu.Lock()
	s.attemptsDown = down
	s.mu.Unlock()
}

// Attempts returns how many times each attempt record id was taken, and
// the ids posted while down.
func (s *Server) Attempts() (taken map[string]int, refused []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	taken = make(map[string]int, len(s.attempts))
	for k, v := range s.attempts {
		taken[k] = v
	}
	for id := range s.attemptsRefused {
		refused = append(refused, id)
	}
	return taken, refused
}

// ChannelHits is the number of channel config requests served.
func (s *Server) ChannelHits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.channelHits
}

// post decodes a posted T, which must have a key (else 400 with code), and
// stores it in m under its key: the first one when keepFirst (an
// idempotent put), else the latest. existed reports an earlier one.
func post[T any](s *Server, w http.ResponseWriter, req *http.Request, m map[string]T, key func(T) string, keepFirst bool, code string) (v T, existed, ok bool) {
	if err := json.NewDecoder(req.Body).Decode(&v); err != nil || key(v) == "" {
		writeErr(w, 400, code)
		return v, false, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, existed = m[key(v)]
	if !existed || !keepFirst {
		m[key(v)] = v
	}
	return v, existed, true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"error":{"message":"fake gateway: %s","type":"server_error","code":%q}}`, code, code)
}

func (s *Server) handle(w http.ResponseWriter, req *http.Request) {
	prefix := internalapi.ProjectURL("", s.ProjectID, "/")
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
		writeJSON(w, http.StatusOK, c)
	case rest == "chat/completions" && req.Method == http.MethodPost:
		s.Upstream.ServeCompletion(w, req)
	case rest == "checkpoints/record" && req.Method == http.MethodPost:
		rec, existed, ok := post(s, w, req, s.records, func(r wire.CheckpointRecord) string { return r.CommitSHA }, false, "bad_record")
		if ok {
			writeJSON(w, http.StatusOK, wire.CheckpointRecordResponse{ID: "ckpt_" + rec.CommitSHA[:min(8, len(rec.CommitSHA))], Created: !existed})
		}
	case rest == "outbox" && req.Method == http.MethodPost:
		put, existed, ok := post(s, w, req, s.outbox, func(p wire.OutboxPut) string { return p.CorrelationID }, true, "bad_outbox_message")
		if ok {
			status := http.StatusCreated
			if existed {
				status = http.StatusOK
			}
			writeJSON(w, status, wire.OutboxPutResponse{ID: "obx_" + put.CorrelationID, Created: !existed})
		}
	case rest == strings.TrimPrefix(internalapi.PathWebhookAttempts, "/") && req.Method == http.MethodPost:
		var in wire.WebhookAttemptsPut
		if json.NewDecoder(req.Body).Decode(&in) != nil {
			writeErr(w, 400, "bad_attempts")
			return
		}
		s.mu.Lock()
		down := s.attemptsDown
		for _, a := range in.Attempts {
			if down {
				s.attemptsRefused[a.ID] = true
			} else {
				s.attempts[a.ID]++
			}
		}
		s.mu.Unlock()
		if down {
			writeErr(w, http.StatusServiceUnavailable, "service_unavailable")
			return
		}
		writeJSON(w, http.StatusOK, wire.WebhookAttemptsPutResponse{Stored: len(in.Attempts)})
	default:
		writeErr(w, 404, "not_found")
	}
}
