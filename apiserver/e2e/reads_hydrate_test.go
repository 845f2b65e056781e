package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/objstore/fs"
	"github.com/svc-dev/svc/shared/repoarchive"
	"github.com/svc-dev/svc/shared/testenv"
)

// readsGet GETs a read endpoint with a bearer key and decodes the body.
func readsGet(t *testing.T, u, key string) (int, http.Header, map[string]any) {
	t.Helper()
	resp, b := do(t, http.MethodGet, u, key, nil, nil)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("GET %s: %d, body is not JSON: %q", u, resp.StatusCode, b)
	}
	return resp.StatusCode, resp.Header, m
}

// readsGit runs the real git client with no user or system config.
func readsGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := readsGitErr(t, dir, args...)
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return out
}

func readsGitErr(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=")
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func readsCode(m map[string]any) string {
	_, code := errFields(m)
	return code
}

// A real pod persists its .git to MinIO and records rows; a real apiserver
// process on the same bucket serves the graph (with the publish tag as
// Published), commit, diff and status, and a real git clone and pull.
func TestReadsFromAPodPersistedRepository(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s3 := testenv.MinIO(t)
	a := e.startAPI("SVC_STORAGE=s3", "SVC_S3_ENDPOINT="+s3.Endpoint, "SVC_S3_BUCKET="+s3.Bucket,
		"SVC_S3_ACCESS_KEY="+s3.AccessKey, "SVC_S3_SECRET_KEY="+s3.SecretKey)
	acc := e.account("free")
	other := e.account("free")
	project := e.admin("project", "create", "--workspace", acc.workspace, "--name", "site")["id"].(string)
	token := e.admin("project", "runtime-token", "--id", project)["token"].(string)
	base := a.URL + "/api/projects/" + project

	// Before the pod ever persisted: a clear 404 on reads.
	if st, _, m := readsGet(t, base+"/checkpoints/graph", acc.key); st != 404 || readsCode(m) != "repository_not_found" {
		t.Fatalf("graph before any persist: %d %v", st, m)
	}

	p := startPod(t, a.URL, project, token, s3)
	must(t, os.WriteFile(filepath.Join(p.workspace, "index.html"), []byte("<h1>one</h1>\n"), 0o644))
	first := p.flush(t).SHA
	must(t, os.WriteFile(filepath.Join(p.workspace, "index.html"), []byte("<h1>two</h1>\n<p>more</p>\n"), 0o644))
	second := p.flush(t).SHA
	pub := e.admin("project", "publish", "--id", project, "--subdomain", "site", "--pod-url", p.URL)
	tag := pub["tag"].(string)
	if pub["sha"] != second {
		t.Fatalf("publish tagged %v, want %s", pub["sha"], second)
	}

	st, hdr, g := readsGet(t, base+"/checkpoints/graph", acc.key)
	if st != 200 || hdr.Get("X-Svc-Durable-ETag") == "" {
		t.Fatalf("graph: %d %v", st, g)
	}
	commits := g["commits"].([]any)
	head := commits[0].(map[string]any)
	if g["head"] != second || head["sha"] != second || head["published"] != true ||
		fmt.Sprint(head["tags"]) != "["+tag+"]" {
		t.Fatalf("graph head %v (want %s published with %s)", head, second, tag)
	}
	foundFirst := false
	for _, c := range commits[1:] {
		cm := c.(map[string]any)
		if cm["published"] == true {
			t.Fatalf("unpublished commit marked published: %v", cm)
		}
		foundFirst = foundFirst || cm["sha"] == first
	}
	if !foundFirst {
		t.Fatalf("first turn %s missing from the graph", first)
	}

	st, _, c := readsGet(t, base+"/checkpoints/commits/"+second, acc.key)
	files, _ := c["files"].([]any)
	if st != 200 || len(files) != 1 || files[0].(map[string]any)["path"] != "index.html" ||
		files[0].(map[string]any)["additions"].(float64) != 2 {
		t.Fatalf("commit: %d %v", st, c)
	}
	st, _, d := readsGet(t, base+"/checkpoints/diff?from="+first+"&to="+url.QueryEscape(tag), acc.key)
	if st != 200 || !strings.Contains(d["diff"].(string), "+<p>more</p>") {
		t.Fatalf("diff: %d %v", st, d)
	}
	st, _, s := readsGet(t, base+"/checkpoints/status", acc.key)
	dur := s["durable"].(map[string]any)
	pubm, _ := s["published"].(map[string]any)
	if st != 200 || s["head"] != second || s["branch"] != "main" || s["syncMode"] != "git_only" ||
		dur["exists"] != true || dur["etag"] == "" || pubm["sha"] != second || pubm["tag"] != tag ||
		s["lastCheckpoint"] == nil {
		t.Fatalf("status: %d %v", st, s)
	}

	// External clone and pull with the real git client (key as Basic password).
	remote, _ := url.Parse(base + "/git")
	remote.User = url.UserPassword("laptop", acc.key)
	dst := filepath.Join(t.TempDir(), "clone")
	readsGit(t, "", "clone", remote.String(), dst)
	if got := readsGit(t, dst, "rev-parse", "HEAD"); got != second {
		t.Fatalf("cloned HEAD %s, want %s", got, second)
	}
	if got := readsGit(t, dst, "tag", "-l"); got != tag {
		t.Fatalf("cloned tags %q", got)
	}
	must(t, os.WriteFile(filepath.Join(p.workspace, "about.html"), []byte("about\n"), 0o644))
	third := p.flush(t).SHA
	readsGit(t, dst, "pull", "--ff-only")
	if got := readsGit(t, dst, "rev-parse", "HEAD"); got != third {
		t.Fatalf("HEAD after pull %s, want %s", got, third)
	}
	shallow := filepath.Join(t.TempDir(), "shallow")
	readsGit(t, "", "-c", "protocol.version=2", "clone", "--depth", "1", remote.String(), shallow)
	if got := readsGit(t, shallow, "rev-list", "--count", "HEAD"); got != "1" {
		t.Fatalf("shallow clone has %s commits", got)
	}

	// Auth matrix on reads and on git.
	for _, tc := range []struct {
		name, key string
		status    int
		code      string
	}{
		{"no key", "", 401, "invalid_api_key"},
		{"bad key", "svc_sk_notreal", 401, "invalid_api_key"},
		{"runtime token", token, 401, "invalid_api_key"},
		{"other workspace", other.key, 403, "project_access_denied"},
	} {
		for _, path := range []string{"/checkpoints/graph", "/checkpoints/status", "/checkpoints/diff", "/checkpoints/commits/" + second} {
			if st, _, m := readsGet(t, base+path, tc.key); st != tc.status || readsCode(m) != tc.code {
				t.Errorf("%s %s: %d %v, want %d %s", tc.name, path, st, m, tc.status, tc.code)
			}
		}
		req, _ := http.NewRequest(http.MethodGet, base+"/git/info/refs?service=git-upload-pack", nil)
		if tc.key != "" {
			req.SetBasicAuth("x", tc.key)
		}
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		resp.Body.Close()
		wantGit := tc.status
		if tc.key == token {
			wantGit = 200 // the project's own pod fetches from its origin (docs/sync-modes.md §2)
		}
		if resp.StatusCode != wantGit || (wantGit == 401 && resp.Header.Get("WWW-Authenticate") == "") {
			t.Errorf("git %s: %d %v", tc.name, resp.StatusCode, resp.Header)
		}
	}
	denied := url.URL{Scheme: remote.Scheme, Host: remote.Host, Path: remote.Path, User: url.UserPassword("x", other.key)}
	if out, err := readsGitErr(t, "", "clone", denied.String(), filepath.Join(t.TempDir(), "denied")); err == nil || !strings.Contains(out, "403") {
		t.Errorf("clone with another workspace's key: %v %s", err, out)
	}

	// Hostile inputs never reach git as options or ranges.
	for _, path := range []string{"/checkpoints/commits/--output=x", "/checkpoints/diff?to=--output=x",
		"/checkpoints/diff?from=" + first + "..HEAD", "/checkpoints/diff?to=HEAD~1", "/checkpoints/commits/xyz1"} {
		if st, _, m := readsGet(t, base+path, acc.key); st != 400 {
			t.Errorf("%s: %d %v, want 400", path, st, m)
		}
	}
}

// With the embedded default (fs storage under the data dir) the API
// hydrates an object written in the pod's layout.
func TestReadsOnFSStorage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dataDir := t.TempDir()
	a := e.startAPI("SVC_DATA_DIR=" + dataDir)
	acc := e.account("free")
	project := e.admin("project", "create", "--workspace", acc.workspace, "--name", "site")["id"].(string)

	work := t.TempDir()
	readsGit(t, work, "init", "-q", "-b", "main")
	must(t, os.WriteFile(filepath.Join(work, "a.txt"), []byte("a\n"), 0o644))
	readsGit(t, work, "add", "-A")
	readsGit(t, work, "-c", "user.name=svc agent", "-c", "user.email=agent@svc.invalid", "commit", "-q", "-m", "turn 1")
	readsGit(t, work, "-c", "user.name=svc agent", "-c", "user.email=agent@svc.invalid", "tag", "-a", "-m", "pub", "publish/site/1700000000")
	head := readsGit(t, work, "rev-parse", "HEAD")
	var buf bytes.Buffer
	_, err := repoarchive.Create(&buf, filepath.Join(work, ".git"), repoarchive.Options{})
	must(t, err)
	st, err := fs.New(filepath.Join(dataDir, "store"), fs.Options{}) // the directory pods use too
	must(t, err)
	_, err = st.Put(context.Background(), objstore.RepoKey(project), &buf, int64(buf.Len()), objstore.PutOptions{})
	must(t, err)

	code, _, g := readsGet(t, a.URL+"/api/projects/"+project+"/checkpoints/graph", acc.key)
	if code != 200 || g["head"] != head {
		t.Fatalf("graph on fs storage: %d %v", code, g)
	}
	if c := g["commits"].([]any)[0].(map[string]any); c["published"] != true {
		t.Fatalf("publish tag not shown as published: %v", c)
	}
}
