package agentapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/apierr"
	"github.com/svc-dev/svc/shared/wire"
)

// fakeRecorder is idempotent on (project, sha), like the store; the
// channel reads of Store are not used by these tests.
type fakeRecorder struct {
	Store
	rows  map[string]string
	calls []string
	err   error
}

func (f *fakeRecorder) RecordCheckpoint(ctx context.Context, projectID string, rec wire.CheckpointRecord, source string) (string, bool, error) {
	f.calls = append(f.calls, projectID+"/"+rec.CommitSHA+"/"+source)
	if f.err != nil {
		return "", false, f.err
	}
	k := projectID + "/" + rec.CommitSHA
	if id, ok := f.rows[k]; ok {
		return id, false, nil
	}
	id := "ckpt_" + rec.CommitSHA[:6]
	f.rows[k] = id
	return id, true, nil
}

const sha1 = "0123456789abcdef0123456789abcdef01234567"
const sha2 = "89abcdef0123456789abcdef0123456789abcdef"

func validRecord() map[string]any {
	return map[string]any{"commitSha": sha1, "parentSha": sha2, "message": "turn 1", "author": "svc agent <agent@svc.invalid>",
		"branch": "main", "filesChanged": 2, "additions": 3, "deletions": 1, "createdAt": time.Unix(1700000000, 0).UTC().Format(time.RFC3339)}
}

func do(t *testing.T, rec *fakeRecorder, body string) (*httptest.ResponseRecorder, map[string]any) {
	e := echo.New()
	e.HTTPErrorHandler = apierr.Handler(zap.NewNop())
	e.POST("/internal/projects/:id/checkpoints/record", (&API{Store: rec}).RecordCheckpoint)
	req := httptest.NewRequest(http.MethodPost, "/internal/projects/p1/checkpoints/record", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	e.ServeHTTP(w, req)
	var out map[string]any
	json.Unmarshal(w.Body.Bytes(), &out)
	return w, out
}

func TestRecordIdempotent(t *testing.T) {
	t.Parallel()
	f := &fakeRecorder{rows: map[string]string{}}
	b, _ := json.Marshal(validRecord())
	w, out := do(t, f, string(b))
	if w.Code != 201 || out["created"] != true || out["id"] != "ckpt_012345" {
		t.Fatalf("first: %d %v", w.Code, out)
	}
	w, out = do(t, f, string(b))
	if w.Code != 200 || out["created"] != false || out["id"] != "ckpt_012345" {
		t.Fatalf("second: %d %v", w.Code, out)
	}
	if len(f.calls) != 2 || f.calls[0] != "p1/"+sha1+"/pod" {
		t.Fatalf("calls = %v", f.calls)
	}
}

func TestValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		edit  func(m map[string]any)
		field string
	}{
		{"short sha", func(m map[string]any) { m["commitSha"] = "abc" }, "commitSha"},
		{"uppercase sha", func(m map[string]any) { m["commitSha"] = strings.ToUpper(sha1) }, "commitSha"},
		{"missing sha", func(m map[string]any) { delete(m, "commitSha") }, "commitSha"},
		{"bad parent", func(m map[string]any) { m["parentSha"] = "xyz" }, "parentSha"},
		{"parent is self", func(m map[string]any) { m["parentSha"] = sha1 }, "parentSha"},
		{"no author", func(m map[string]any) { m["author"] = " " }, "author"},
		{"no branch", func(m map[string]any) { delete(m, "branch") }, "branch"},
		{"option-like branch", func(m map[string]any) { m["branch"] = "--force" }, "branch"},
		{"dotdot branch", func(m map[string]any) { m["branch"] = "a..b" }, "branch"},
		{"negative counts", func(m map[string]any) { m["additions"] = -1 }, "additions"},
		{"no createdAt", func(m map[string]any) { delete(m, "createdAt") }, "createdAt"},
		{"huge message", func(m map[string]any) { m["message"] = strings.Repeat("x", MaxMessageBytes+1) }, "message"},
		{"wrong type", func(m map[string]any) { m["filesChanged"] = "two" }, "JSON checkpoint record"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := validRecord()
			tt.edit(m)
			b, _ := json.Marshal(m)
			f := &fakeRecorder{rows: map[string]string{}}
			w, out := do(t, f, string(b))
			errObj, _ := out["error"].(map[string]any)
			if w.Code != 400 || errObj == nil || !strings.Contains(errObj["message"].(string), tt.field) || errObj["type"] == "" {
				t.Fatalf("%d %v", w.Code, out)
			}
			if len(f.calls) != 0 {
				t.Fatal("invalid record reached the recorder")
			}
		})
	}
	// A root commit has no parent.
	m := validRecord()
	delete(m, "parentSha")
	b, _ := json.Marshal(m)
	if w, _ := do(t, &fakeRecorder{rows: map[string]string{}}, string(b)); w.Code != 201 {
		t.Fatalf("root commit: %d", w.Code)
	}
	if w, _ := do(t, &fakeRecorder{rows: map[string]string{}}, `{`); w.Code != 400 {
		t.Fatalf("broken JSON: %d", w.Code)
	}
	if w, _ := do(t, &fakeRecorder{rows: map[string]string{}}, strings.Repeat(" ", MaxCheckpointBodyBytes+10)); w.Code != 413 {
		t.Fatalf("huge body: %d", w.Code)
	}
}

func TestStoreErrorIs500WithoutDetails(t *testing.T) {
	t.Parallel()
	b, _ := json.Marshal(validRecord())
	w, out := do(t, &fakeRecorder{err: errors.New("pq: connection refused to 10.0.0.7")}, string(b))
	if w.Code != 500 || strings.Contains(w.Body.String(), "10.0.0.7") {
		t.Fatalf("%d %v", w.Code, out)
	}
}
