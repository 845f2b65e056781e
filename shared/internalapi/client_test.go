package internalapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/wire"
)

func TestProjectURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ base, id, path, want string }{
		{"http://api:8080", "prj_1", internalapi.PathChannel, "http://api:8080/internal/projects/prj_1/channel"},
		{"http://api:8080/", "prj_1", internalapi.PathLFS, "http://api:8080/internal/projects/prj_1/lfs"},
		{"http://api", "a/b", internalapi.PathOutbox, "http://api/internal/projects/a%2Fb/outbox"},
	} {
		if got := internalapi.ProjectURL(tc.base, tc.id, tc.path); got != tc.want {
			t.Errorf("ProjectURL(%q, %q, %q) = %q, want %q", tc.base, tc.id, tc.path, got, tc.want)
		}
	}
}

func TestClientCallsAndErrors(t *testing.T) {
	t.Parallel()
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Method+" "+r.URL.Path)
		if r.URL.Path == "/readyz" { // probes carry no token
			return
		}
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(wire.ErrorBody{Error: wire.ErrorDetail{Code: "invalid_runtime_token", Type: "authentication_error"}})
			return
		}
		switch r.URL.Path {
		case "/internal/projects/p1/checkpoints/record":
			_ = json.NewEncoder(w).Encode(wire.CheckpointRecordResponse{ID: "cp_1", Created: true})
		case "/internal/projects/p1/channel":
			_ = json.NewEncoder(w).Encode(wire.ChannelConfig{ChannelID: "ch_1"})
		case "/internal/projects/p1/outbox":
			_ = json.NewEncoder(w).Encode(wire.OutboxPutResponse{ID: "ob_1"})
		case "/internal/projects/p1/outbox/pending":
			_ = json.NewEncoder(w).Encode(wire.OutboxPending{ChannelID: "ch_1", Pending: 3})
		case "/agent/git-flush":
			_ = json.NewEncoder(w).Encode(wire.GitFlushResponse{SHA: "abc"})
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	c := &internalapi.Client{BaseURL: srv.URL, ProjectID: "p1", Token: "tok"}
	if r, err := c.RecordCheckpoint(ctx, wire.CheckpointRecord{CommitSHA: "a"}); err != nil || r.ID != "cp_1" {
		t.Fatalf("record: %+v %v", r, err)
	}
	if r, err := c.ChannelConfig(ctx, 0); err != nil || r.ChannelID != "ch_1" {
		t.Fatalf("channel: %+v %v", r, err)
	}
	if r, err := c.PutOutbox(ctx, wire.OutboxPut{}); err != nil || r.ID != "ob_1" {
		t.Fatalf("outbox: %+v %v", r, err)
	}
	if r, err := c.OutboxPending(ctx, 0); err != nil || r.ChannelID != "ch_1" || r.Pending != 3 {
		t.Fatalf("outbox pending: %+v %v", r, err)
	}
	pod := &internalapi.PodClient{BaseURL: srv.URL, Token: "tok"}
	if r, err := pod.GitFlush(ctx, wire.GitFlushRequest{}); err != nil || r.SHA != "abc" {
		t.Fatalf("git-flush: %+v %v", r, err)
	}
	if err := pod.Ready(ctx); err != nil {
		t.Fatalf("ready: %v", err)
	}
	bad := &internalapi.Client{BaseURL: srv.URL, ProjectID: "p1", Token: "nope"}
	_, err := bad.ChannelConfig(ctx, 0)
	se, ok := internalapi.AsStatus(err)
	if !ok || se.Status != http.StatusUnauthorized || se.Body.Error.Code != "invalid_runtime_token" {
		t.Fatalf("wrong token: %v", err)
	}
	if _, err := (&internalapi.PodClient{BaseURL: "ftp://x", Token: "t"}).GitFlush(ctx, wire.GitFlushRequest{}); err == nil {
		t.Fatal("ftp pod URL accepted")
	}
	if _, err := (&internalapi.Client{}).PutOutbox(ctx, wire.OutboxPut{}); err == nil {
		t.Fatal("empty SVC_API_URL accepted")
	}
	want := []string{"POST /internal/projects/p1/checkpoints/record", "GET /internal/projects/p1/channel",
		"POST /internal/projects/p1/outbox", "GET /internal/projects/p1/outbox/pending", "POST /agent/git-flush", "GET /readyz", "GET /internal/projects/p1/channel"}
	if len(seen) != len(want) {
		t.Fatalf("requests %v, want %v", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("requests %v, want %v", seen, want)
		}
	}
}
