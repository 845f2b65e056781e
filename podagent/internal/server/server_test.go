package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/svc-dev/svc/podagent/internal/gitsync"
	"github.com/svc-dev/svc/podagent/internal/server"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/wire"
)

// flusher answers every flush with err and remembers the options it got.
type flusher struct {
	err error
	got []gitsync.FlushOptions
}

func (f *flusher) Flush(_ context.Context, fo gitsync.FlushOptions) (wire.GitFlushResponse, error) {
	f.got = append(f.got, fo)
	if f.err != nil {
		return wire.GitFlushResponse{}, f.err
	}
	return wire.GitFlushResponse{SHA: strings.Repeat("a", 40), Tag: fo.Tag}, nil
}

type restorer struct{ err error }

func (r restorer) Restore(_ context.Context, sha string) (wire.RestoreResponse, error) {
	return wire.RestoreResponse{}, r.err
}

const token = "runtime-token-of-p1"

// The pod's route table: probes are open, /agent/* needs the runtime token,
// bad bodies are refused before the flusher runs, and every sync error
// reaches the caller as its own code of the one vocabulary.
func TestRoutes(t *testing.T) {
	t.Parallel()
	tag := "publish/docs/1700000000"
	for _, tc := range []struct {
		name, method, path, auth, body string
		flushErr, restoreErr           error
		ready                          error
		status                         int
		code                           string
		flushed                        int // calls the flusher must have seen
	}{
		{name: "healthz is open", method: "GET", path: internalapi.PodHealthz, status: 200},
		{name: "readyz ready", method: "GET", path: internalapi.PodReadyz, status: 200},
		{name: "readyz not ready", method: "GET", path: internalapi.PodReadyz, ready: errors.New("restoring"), status: 503, code: "not_ready"},
		{name: "metrics open", method: "GET", path: internalapi.PodMetrics, status: 200},
		{name: "flush without a token", method: "POST", path: internalapi.PodGitFlush, status: 401, code: "invalid_runtime_token"},
		{name: "flush with another token", method: "POST", path: internalapi.PodGitFlush, auth: "Bearer other", status: 401, code: "invalid_runtime_token"},
		{name: "flush, basic auth", method: "POST", path: internalapi.PodGitFlush, auth: "Basic " + token, status: 401, code: "invalid_runtime_token"},
		{name: "flush", method: "POST", path: internalapi.PodGitFlush, auth: "Bearer " + token, status: 200, flushed: 1},
		{name: "flush with a tag", method: "POST", path: internalapi.PodGitFlush, auth: "Bearer " + token,
			body: fmt.Sprintf(`{"tag":%q,"tagMessage":"docs"}`, tag), status: 200, flushed: 1},
		{name: "tag without message", method: "POST", path: internalapi.PodGitFlush, auth: "Bearer " + token,
			body: fmt.Sprintf(`{"tag":%q}`, tag), status: 400, code: "invalid_tag"},
		{name: "not a publish tag", method: "POST", path: internalapi.PodGitFlush, auth: "Bearer " + token,
			body: `{"tag":"v1","tagMessage":"m"}`, status: 400, code: "invalid_tag"},
		{name: "body not JSON", method: "POST", path: internalapi.PodGitFlush, auth: "Bearer " + token, body: `{`, status: 400, code: "invalid_body"},
		{name: "body too large", method: "POST", path: internalapi.PodGitFlush, auth: "Bearer " + token,
			body: `{"tag":"` + strings.Repeat("x", server.MaxFlushBodyBytes) + `"}`, status: 413, code: "request_too_large"},
		{name: "fenced", method: "POST", path: internalapi.PodGitFlush, auth: "Bearer " + token, flushErr: gitsync.ErrFenced,
			status: 409, code: "fenced", flushed: 1},
		{name: "tag exists", method: "POST", path: internalapi.PodGitFlush, auth: "Bearer " + token, flushErr: gitsync.ErrTagExists,
			status: 409, code: "tag_exists", flushed: 1},
		{name: "shutting down", method: "POST", path: internalapi.PodGitFlush, auth: "Bearer " + token, flushErr: gitsync.ErrClosed,
			status: 503, code: "shutting_down", flushed: 1},
		{name: "not persisted", method: "POST", path: internalapi.PodGitFlush, auth: "Bearer " + token, flushErr: gitsync.ErrNotPersisted,
			status: 503, code: "not_persisted", flushed: 1},
		{name: "flush timeout", method: "POST", path: internalapi.PodGitFlush, auth: "Bearer " + token, flushErr: context.DeadlineExceeded,
			status: 503, code: "flush_timeout", flushed: 1},
		{name: "other flush error", method: "POST", path: internalapi.PodGitFlush, auth: "Bearer " + token, flushErr: errors.New("disk on fire"),
			status: 500, code: "internal_error", flushed: 1},
		{name: "restore", method: "POST", path: internalapi.PodRestore, auth: "Bearer " + token, body: `{"sha":"` + strings.Repeat("b", 40) + `"}`, status: 200},
		{name: "restore, short sha", method: "POST", path: internalapi.PodRestore, auth: "Bearer " + token, body: `{"sha":"abc"}`, status: 400, code: "invalid_sha"},
		{name: "restore, unknown commit", method: "POST", path: internalapi.PodRestore, auth: "Bearer " + token,
			body: `{"sha":"` + strings.Repeat("c", 40) + `"}`, restoreErr: gitsync.ErrUnknownCommit, status: 404, code: "commit_not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &flusher{err: tc.flushErr}
			e := server.New(server.Options{RuntimeToken: token, Registry: gitsync.NewMetrics().Registry, Flusher: f,
				Restorer: restorer{err: tc.restoreErr}, Ready: func() error { return tc.ready }})
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			if tc.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, req)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
			if tc.code != "" {
				var env wire.ErrorBody
				if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil || env.Error.Code != tc.code {
					t.Fatalf("body %s, want the envelope with code %q", rec.Body, tc.code)
				}
			}
			if len(f.got) != tc.flushed {
				t.Fatalf("flusher called %d times, want %d", len(f.got), tc.flushed)
			}
		})
	}
}

// Without a restorer or a webhook channel their routes are not mounted.
func TestOptionalRoutesUnmounted(t *testing.T) {
	t.Parallel()
	e := server.New(server.Options{RuntimeToken: token, Flusher: &flusher{}})
	for _, path := range []string{internalapi.PodRestore, internalapi.PodWebhook + "/incoming", internalapi.PodMetrics} {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		if rec.Code != http.StatusNotFound && rec.Code != http.StatusMethodNotAllowed {
			t.Errorf("%s: %d, want 404 or 405 (not mounted)", path, rec.Code)
		}
	}
}

// A ready pod names its project and generation, so the runtime driver can
// tell its own pod from another at the same address.
func TestReadyzNamesThePod(t *testing.T) {
	t.Parallel()
	e := server.New(server.Options{RuntimeToken: token, ProjectID: "prj_a", Generation: 4, Flusher: &flusher{}})
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest("GET", internalapi.PodReadyz, nil))
	var got wire.PodReadiness
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != 200 {
		t.Fatalf("readyz: %d %s", rec.Code, rec.Body)
	}
	if want := (wire.PodReadiness{Status: "ready", ProjectID: "prj_a", Generation: 4}); got != want {
		t.Fatalf("readyz %+v, want %+v", got, want)
	}
	if err := got.Serves("prj_b", 0); err == nil {
		t.Fatal("the readiness of prj_a serves prj_b")
	}
}
