package spare

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/runtimetoken"
	"github.com/svc-dev/svc/shared/wire"
)

func claimBody(project string, gen int64) string {
	b, _ := json.Marshal(wire.PodClaim{ProjectID: project, SyncMode: "git_only", Generation: gen,
		RuntimeToken: runtimetoken.Mint([]byte("s"), project)})
	return string(b)
}

// The spare's surface in order: unassigned readiness, the claim refused
// without its bootstrap token or with a bad body, taken once, the same claim
// again accepted, another refused, /readyz 503 while the claimed pod
// starts, the pod's routes after the handoff.
func TestSpareClaim(t *testing.T) {
	t.Parallel()
	boot := runtimetoken.Bootstrap([]byte("secret"), "svc-rt-spare-0-1")
	file := filepath.Join(t.TempDir(), "data", ClaimFileName)
	s, err := New(Options{Bootstrap: boot, ClaimFile: file})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name, method, path, bearer, body string
		status                           int
		want                             string
	}{
		{"healthz", "GET", internalapi.PodHealthz, "", "", 200, `"ok"`},
		{"readyz unassigned", "GET", internalapi.PodReadyz, "", "", 200, `"status":"unassigned"`},
		{"agent routes absent", "POST", internalapi.PodGitFlush, boot, "{}", 404, "not_found"},
		{"claim without a bearer", "POST", internalapi.PodClaim, "", claimBody("p1", 1), 401, "unauthorized"},
		{"claim with another pod's token", "POST", internalapi.PodClaim,
			runtimetoken.Bootstrap([]byte("secret"), "svc-rt-spare-1-1"), claimBody("p1", 1), 401, "unauthorized"},
		{"claim with a runtime token", "POST", internalapi.PodClaim, runtimetoken.Mint([]byte("secret"), "p1"), claimBody("p1", 1), 401, "unauthorized"},
		{"claim not JSON", "POST", internalapi.PodClaim, boot, "{", 400, "invalid_json"},
		{"claim without generation", "POST", internalapi.PodClaim, boot, claimBody("p1", 0), 400, "invalid_request"},
		{"claim with a bad mode", "POST", internalapi.PodClaim, boot,
			`{"projectId":"p1","syncMode":"nope","generation":1,"runtimeToken":"t"}`, 400, "invalid_request"},
		{"readyz still unassigned", "GET", internalapi.PodReadyz, "", "", 200, `"unassigned"`},
		{"claim", "POST", internalapi.PodClaim, boot, claimBody("p1", 2), 202, `"projectId":"p1","generation":2`},
		{"the same claim again", "POST", internalapi.PodClaim, boot, claimBody("p1", 2), 202, `"starting"`},
		{"another project's claim", "POST", internalapi.PodClaim, boot, claimBody("p2", 1), 409, "pod_claimed"},
		{"another generation's claim", "POST", internalapi.PodClaim, boot, claimBody("p1", 3), 409, "pod_claimed"},
		{"readyz while starting", "GET", internalapi.PodReadyz, "", "", 503, "not_ready"},
		{"agent routes while starting", "POST", internalapi.PodGitFlush, boot, "{}", 503, "not_ready"},
	}
	for _, st := range steps {
		req := httptest.NewRequest(st.method, st.path, strings.NewReader(st.body))
		if st.bearer != "" {
			req.Header.Set("Authorization", "Bearer "+st.bearer)
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code != st.status || !strings.Contains(rec.Body.String(), st.want) {
			t.Errorf("%s: %d %s, want %d with %s", st.name, rec.Code, rec.Body, st.status, st.want)
		}
	}
	select {
	case <-s.Claimed():
	default:
		t.Fatal("Claimed is not closed after the claim")
	}
	if c := s.Claim(); c.ProjectID != "p1" || c.Generation != 2 || c.SyncMode != "git_only" {
		t.Errorf("claim %+v", c)
	}
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("claim file: %v %v", fi, err)
	}
	s.Handoff(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", internalapi.PodReadyz, nil))
	if rec.Code != http.StatusTeapot {
		t.Errorf("after the handoff /readyz answered %d, want the pod's routes", rec.Code)
	}

	// A podagent restarted in the claimed pod resumes the claim.
	again, err := New(Options{Bootstrap: boot, ClaimFile: file})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-again.Claimed():
	default:
		t.Fatal("a restarted spare did not resume its claim")
	}
	if c := again.Claim(); c.ProjectID != "p1" || c.Generation != 2 {
		t.Errorf("resumed claim %+v", c)
	}
	// A damaged claim file is an error, not an unassigned pod.
	if err := os.WriteFile(file, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Bootstrap: boot, ClaimFile: file}); err == nil {
		t.Error("a damaged claim file was ignored")
	}
}
