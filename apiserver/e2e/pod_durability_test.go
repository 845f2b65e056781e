package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/runtimetoken"
	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/wire"
)

// pod is a running podagent process.
type pod struct {
	URL, token, workspace string
}

// startPod runs `podagent serve` for project on a fresh MinIO bucket,
// recording checkpoints through the API at apiURL.
func startPod(t *testing.T, apiURL, project, token string, s3 testenv.S3Env) *pod {
	t.Helper()
	bin, err := podagentBinary()
	must(t, err)
	// A port FreePort found free can be taken before the agent binds it
	// (another process's outgoing connection): start again on another one.
	for attempt := 1; ; attempt++ {
		port, err := testenv.FreePort()
		must(t, err)
		p := &pod{URL: fmt.Sprintf("http://127.0.0.1:%d", port), token: token, workspace: filepath.Join(t.TempDir(), "ws")}
		cmd := exec.Command(bin, "serve")
		cmd.Env = append(os.Environ(), "SVC_PROJECT_ID="+project, "SVC_RUNTIME_TOKEN="+token, "SVC_API_URL="+apiURL,
			"SVC_CLOUD_SYNC_MODE=git_only", "SVC_STORAGE=s3", "SVC_S3_ENDPOINT="+s3.Endpoint, "SVC_S3_BUCKET="+s3.Bucket,
			"SVC_S3_ACCESS_KEY="+s3.AccessKey, "SVC_S3_SECRET_KEY="+s3.SecretKey, "SVC_WORKSPACE_DIR="+p.workspace,
			"SVC_DATA_DIR="+t.TempDir(), fmt.Sprintf("SVC_HTTP_ADDR=127.0.0.1:%d", port), "SVC_LOG_LEVEL=warn")
		logs := startProcess(t, "podagent", cmd)
		if waitReadyOrPortTaken(t, "podagent", p.URL+"/readyz", 30*time.Second, logs) {
			return p
		}
		if attempt == 3 {
			t.Fatalf("podagent: three picked ports were taken before it bound them\n%s", logs.String())
		}
	}
}

func (p *pod) flush(t *testing.T) wire.GitFlushResponse {
	t.Helper()
	var out wire.GitFlushResponse
	postJSON(t, "git-flush", p.URL+"/agent/git-flush", p.token, `{}`, &out)
	return out
}

func (e *env) checkpointCount(project string) int {
	e.t.Helper()
	return int(e.admin("parity-check", "--project", project)["checkpoints"].(float64))
}

// A real pod records one checkpoint row per flushed turn through the real
// record endpoint, an unchanged tree adds none, and publish tags the head.
func TestPodCheckpointsAndPublishThroughTheAPI(t *testing.T) {
	t.Parallel()
	e, a, acc := freeAccount(t)
	project := e.admin("project", "create", "--workspace", acc.workspace, "--name", "site")["id"].(string)
	token := e.admin("project", "runtime-token", "--id", project)["token"].(string)
	p := startPod(t, a.URL, project, token, testenv.MinIO(t))

	base := e.checkpointCount(project)
	seen := map[string]bool{}
	for i := 1; i <= 3; i++ {
		must(t, os.WriteFile(filepath.Join(p.workspace, fmt.Sprintf("page%d.html", i)), []byte(fmt.Sprintf("<h1>%d</h1>", i)), 0o644))
		sha := p.flush(t).SHA
		if seen[sha] || len(sha) != 40 {
			t.Fatalf("turn %d: sha %q (seen before: %v)", i, sha, seen[sha])
		}
		seen[sha] = true
	}
	if n := e.checkpointCount(project); n != base+3 {
		t.Fatalf("checkpoint rows %d, want %d", n, base+3)
	}
	p.flush(t) // nothing changed
	if n := e.checkpointCount(project); n != base+3 {
		t.Fatalf("a flush without changes added rows: %d", n)
	}

	out := e.admin("project", "publish", "--id", project, "--subdomain", "site", "--pod-url", p.URL)
	tag, _ := out["tag"].(string)
	if !regexp.MustCompile(`^publish/site/\d+$`).MatchString(tag) || len(out["sha"].(string)) != 40 {
		t.Fatalf("publish answer %v", out)
	}
	row := e.admin("project", "show", "--id", project)
	if row["publishedTag"] != tag || row["publishedCommitSha"] != out["sha"] {
		t.Fatalf("project row after publish: %v", row)
	}

	// The record endpoint takes only this project's runtime token.
	other := e.admin("project", "create", "--workspace", acc.workspace, "--name", "other")["id"].(string)
	rec := []byte(`{"commitSha":"0123456789abcdef0123456789abcdef01234567","message":"m","author":"a","branch":"main"}`)
	for name, tok := range map[string]string{
		"other project's token": runtimetoken.Mint([]byte("e2e-runtime-secret"), other),
		"api key":               acc.key,
		"forged":                runtimetoken.Mint([]byte("wrong-secret"), project),
	} {
		req, _ := http.NewRequest(http.MethodPost, a.URL+"/internal/projects/"+project+"/checkpoints/record", bytes.NewReader(rec))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("%s: status %d, want 401", name, resp.StatusCode)
		}
	}
	if n := e.checkpointCount(project); n != base+3 {
		t.Fatalf("refused records changed the rows: %d", n)
	}
}
