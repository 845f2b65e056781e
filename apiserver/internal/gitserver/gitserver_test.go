package gitserver_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/gitserver"
	"github.com/svc-dev/svc/apiserver/internal/hydrate/hydratetest"
	"github.com/svc-dev/svc/apiserver/internal/server/servertest"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/archive"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/repoarchive"
	"github.com/svc-dev/svc/shared/runtimetoken"
	"github.com/svc-dev/svc/shared/syncmode"
	"github.com/svc-dev/svc/shared/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// client runs the real git client with no user or system config.
type client struct {
	t    *testing.T
	home string
}

func newClient(t *testing.T) *client { return &client{t: t, home: t.TempDir()} }

func (c *client) run(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+c.home, "XDG_CONFIG_HOME="+c.home, "GIT_CONFIG_NOSYSTEM=1",
		"GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=", "SSH_ASKPASS=", "LC_ALL=C",
		"GIT_AUTHOR_NAME=laptop", "GIT_AUTHOR_EMAIL=dev@laptop.invalid",
		"GIT_COMMITTER_NAME=laptop", "GIT_COMMITTER_EMAIL=dev@laptop.invalid")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
}

func (c *client) must(dir string, args ...string) string {
	c.t.Helper()
	out, err := c.run(dir, args...)
	if err != nil {
		c.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return out
}

type fx struct {
	*servertest.Hydrated
	w *hydratetest.Work
}

func setup(t *testing.T) *fx {
	f := &fx{Hydrated: servertest.NewHydrated(t, nil), w: hydratetest.NewWork(t)}
	f.w.Commit("init", map[string]string{"README.md": "# app\n", "app.js": "a\n"})
	f.w.Commit("two", map[string]string{"app.js": "a\nb\n"})
	f.w.Tag("publish/site/1700000100", "publish")
	f.w.Commit("three", map[string]string{"app.js": "a\nb\nc\n"})
	f.w.Persist(f.Objects, f.Project.ID)
	return f
}

// remote is the clone URL with the key as Basic password.
func (f *fx) remote(key string) string {
	u, _ := url.Parse(f.URL + "/api/projects/" + f.Project.ID + "/git")
	if key != "" {
		u.User = url.UserPassword("anyone", key)
	}
	return u.String()
}

func TestCloneAndPull(t *testing.T) {
	t.Parallel()
	for _, proto := range []string{"0", "1", "2"} {
		t.Run("protocol-v"+proto, func(t *testing.T) {
			f := setup(t)
			c := newClient(t)
			dst := filepath.Join(t.TempDir(), "clone")
			out := c.must("", "-c", "protocol.version="+proto, "clone", f.remote(f.Key), dst)
			_ = out
			if got := c.must(dst, "rev-parse", "HEAD"); got != f.w.Head() {
				t.Fatalf("cloned HEAD %s, want %s", got, f.w.Head())
			}
			if got := c.must(dst, "tag", "-l"); got != "publish/site/1700000100" {
				t.Fatalf("tags %q", got)
			}
			if got := c.must(dst, "rev-list", "--count", "HEAD"); got != "3" {
				t.Fatalf("history of %s commits", got)
			}
			// New commits persisted by the pod arrive with a pull.
			f.w.Commit("four", map[string]string{"new.txt": "new\n"})
			f.w.Commit("five", map[string]string{"new.txt": "newer\n"})
			f.w.Persist(f.Objects, f.Project.ID)
			c.must(dst, "-c", "protocol.version="+proto, "pull", "--ff-only")
			if got := c.must(dst, "rev-parse", "HEAD"); got != f.w.Head() {
				t.Fatalf("HEAD after pull %s, want %s", got, f.w.Head())
			}
			if b, _ := os.ReadFile(filepath.Join(dst, "new.txt")); string(b) != "newer\n" {
				t.Fatalf("work tree after pull: %q", b)
			}
		})
	}
}

func TestProtocolV2IsSpoken(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := newClient(t)
	dst := filepath.Join(t.TempDir(), "clone")
	cmd := exec.Command("git", "-c", "protocol.version=2", "clone", f.remote(f.Key), dst)
	cmd.Env = append(os.Environ(), "HOME="+c.home, "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0", "GIT_TRACE_PACKET=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(string(out), "version 2") || !strings.Contains(string(out), "command=fetch") {
		t.Fatalf("protocol v2 not negotiated:\n%s", out)
	}
}

func TestShallowClone(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := newClient(t)
	for _, proto := range []string{"0", "2"} {
		dst := filepath.Join(t.TempDir(), "shallow")
		c.must("", "-c", "protocol.version="+proto, "clone", "--depth", "1", f.remote(f.Key), dst)
		if got := c.must(dst, "rev-list", "--count", "HEAD"); got != "1" {
			t.Fatalf("v%s: shallow clone has %s commits", proto, got)
		}
		if _, err := os.Stat(filepath.Join(dst, ".git", "shallow")); err != nil {
			t.Fatalf("v%s: not shallow: %v", proto, err)
		}
	}
}

func TestBearerAuthClone(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := newClient(t)
	dst := filepath.Join(t.TempDir(), "clone")
	c.must("", "-c", "http.extraHeader=Authorization: Bearer "+f.Key, "clone", f.remote(""), dst)
	if got := c.must(dst, "rev-parse", "HEAD"); got != f.w.Head() {
		t.Fatalf("HEAD %s", got)
	}
}

// Push-back is refused with a message on the client's terminal unless it
// is the project's pod pushing in dual_shadow; nothing is written then.
func TestPushBackRefused(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, mode, cred, want string
	}{
		{"git_only member", "git_only", "key", "remote error: push-back is refused: the project's pod owns its history"},
		{"git_only another member", "git_only", "key", "(mode=git_only)"},
		{"s3 member", "s3", "key", "(mode=s3)"},
		{"dual_shadow member", "dual_shadow", "key", "only the project's pod pushes to this repository"},
		// The pod's own push outside dual_shadow (a pod started as
		// dual_shadow whose row now says otherwise): refused, read at the
		// request; the durable object stays the pod's.
		{"git_only pod", "git_only", "token", "remote error: push is refused: the API is hydrate-only outside dual_shadow and never persists a push (mode=git_only)"},
		{"s3 pod", "s3", "token", "(mode=s3)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t)
			ctx := context.Background()
			_, err := f.Store.SetSyncMode(ctx, f.Project.ID, syncmode.Mode(tc.mode))
			testenv.Must(t, err)
			cred := f.Key
			if tc.cred == "token" {
				cred = f.RuntimeToken
			}
			c := newClient(t)
			dst := filepath.Join(t.TempDir(), "clone")
			c.must("", "clone", f.remote(cred), dst)
			before, err := f.Objects.Head(ctx, objstore.RepoKey(f.Project.ID))
			testenv.Must(t, err)
			rows := countRows(t, f, "")
			testenv.Must(t, os.WriteFile(filepath.Join(dst, "laptop.txt"), []byte("one\n"), 0o644))
			c.must(dst, "add", "-A")
			c.must(dst, "commit", "-q", "-m", "from laptop")
			out, err := c.run(dst, "push", "origin", "main")
			if err == nil || !strings.Contains(out, tc.want) {
				t.Fatalf("push: %v\n%s\nwant a refusal containing %q", err, out, tc.want)
			}
			after, err := f.Objects.Head(ctx, objstore.RepoKey(f.Project.ID))
			testenv.Must(t, err)
			if after.ETag != before.ETag || countRows(t, f, "") != rows {
				t.Fatal("a refused push wrote the durable object or a row")
			}
			// The running pod's next fenced persist (If-Match the ETag it
			// wrote last) still succeeds: the refused push did not fence it.
			f.w.Commit("pod turn", map[string]string{"pod.txt": "turn\n"})
			b := f.w.Archive()
			if _, err := f.Objects.Put(ctx, objstore.RepoKey(f.Project.ID), bytes.NewReader(b), int64(len(b)),
				objstore.PutOptions{IfMatch: before.ETag}); err != nil {
				t.Fatalf("the pod's next persist after a refused push: %v", err)
			}
		})
	}
}

// In dual_shadow the pod's push is made durable by the API (a fenced PUT of
// repo.git.tar.gz) and its post-receive writes one row per pushed commit,
// with turn numbers; a project with no durable object yet starts from an
// empty repository.
func TestDualShadowPushIsDurable(t *testing.T) {
	t.Run("existing history", func(t *testing.T) {
		f := setup(t)
		ctx := context.Background()
		_, err := f.Store.SetSyncMode(ctx, f.Project.ID, syncmode.DualShadow)
		testenv.Must(t, err)
		c := newClient(t)
		dst := filepath.Join(t.TempDir(), "clone")
		c.must("", "clone", f.remote(f.RuntimeToken), dst)
		before, err := f.Objects.Head(ctx, objstore.RepoKey(f.Project.ID))
		testenv.Must(t, err)
		rows := countRows(t, f, "")
		var shas []string
		for i := 1; i <= 2; i++ {
			testenv.Must(t, os.WriteFile(filepath.Join(dst, "turn.txt"), []byte(strings.Repeat("x\n", i)), 0o644))
			c.must(dst, "add", "-A")
			c.must(dst, "commit", "-q", "-m", fmt.Sprintf("turn %d", i))
			shas = append(shas, c.must(dst, "rev-parse", "HEAD"))
		}
		c.must(dst, "push", "origin", "main")
		after, err := f.Objects.Head(ctx, objstore.RepoKey(f.Project.ID))
		testenv.Must(t, err)
		if after.ETag == before.ETag {
			t.Fatal("the push did not write the durable object")
		}
		if got := durableHead(t, f); got != shas[1] {
			t.Fatalf("durable object's main %s, want %s", got, shas[1])
		}
		if got := countRows(t, f, store.SourceReceivePack); got != 2 || countRows(t, f, "") != rows+2 {
			t.Fatalf("%d receive-pack rows (%d in all, %d before), want one per pushed commit", got, countRows(t, f, ""), rows)
		}
		cps, err := f.Store.ListCheckpoints(ctx, f.Project.ID, 100)
		testenv.Must(t, err)
		turns := map[string]int64{}
		for _, cp := range cps {
			if cp.Turn != nil {
				turns[cp.CommitSHA] = *cp.Turn
			}
		}
		// setup made turns 0..2.
		if turns[shas[0]] != 3 || turns[shas[1]] != 4 {
			t.Fatalf("turn numbers %v, want 3 and 4", turns)
		}
		// A push that changes nothing writes nothing.
		afterState, err := durableETag(ctx, f)
		testenv.Must(t, err)
		c.must(dst, "push", "origin", "main")
		again, err := durableETag(ctx, f)
		testenv.Must(t, err)
		if again != afterState || countRows(t, f, "") != rows+2 {
			t.Fatal("an empty push wrote the object or rows")
		}
		// The next push writes an increment of the pushed objects and the
		// manifest; the archive is not rewritten.
		testenv.Must(t, os.WriteFile(filepath.Join(dst, "turn.txt"), []byte("y\n"), 0o644))
		c.must(dst, "commit", "-q", "-am", "turn 3")
		third := c.must(dst, "rev-parse", "HEAD")
		c.must(dst, "push", "origin", "main")
		base, err := f.Objects.Head(ctx, objstore.RepoKey(f.Project.ID))
		testenv.Must(t, err)
		man, _, err := repoarchive.GetManifest(ctx, f.Objects, f.Project.ID)
		testenv.Must(t, err)
		if base.ETag != after.ETag || len(man.Increments) != 1 || man.Refs["refs/heads/main"] != third || man.Increments[0].Bytes > 64<<10 {
			t.Fatalf("second push: base rewritten %v, manifest %+v", base.ETag != after.ETag, man)
		}
		// A clone reads base + increment.
		clone := filepath.Join(t.TempDir(), "again")
		c.must("", "clone", f.remote(f.RuntimeToken), clone)
		if got := c.must(clone, "rev-parse", "HEAD"); got != third {
			t.Fatalf("clone after an incremental push: HEAD %s, want %s", got, third)
		}
	})
	t.Run("no durable object yet", func(t *testing.T) {
		f := &fx{Hydrated: servertest.NewHydrated(t, nil)}
		ctx := context.Background()
		_, err := f.Store.SetSyncMode(ctx, f.Project.ID, syncmode.DualShadow)
		testenv.Must(t, err)
		c := newClient(t)
		dst := filepath.Join(t.TempDir(), "seed")
		c.must("", "clone", f.remote(f.RuntimeToken), dst) // an empty repository
		testenv.Must(t, os.WriteFile(filepath.Join(dst, "index.html"), []byte("hi\n"), 0o644))
		c.must(dst, "add", "-A")
		c.must(dst, "commit", "-q", "-m", "initial commit")
		c.must(dst, "push", "origin", "HEAD:refs/heads/main")
		head := c.must(dst, "rev-parse", "HEAD")
		if got := durableHead(t, f); got != head {
			t.Fatalf("durable main %s, want %s", got, head)
		}
		cps, err := f.Store.ListCheckpoints(ctx, f.Project.ID, 10)
		testenv.Must(t, err)
		if len(cps) != 1 || cps[0].CommitSHA != head || cps[0].Turn == nil || *cps[0].Turn != 0 {
			t.Fatalf("rows %+v", cps)
		}
	})
}

// durableHead reads main of the durable state: the manifest's refs when
// the project has one (the commit point), else the stored archive's.
func durableHead(t *testing.T, f *fx) string {
	t.Helper()
	man, _, err := repoarchive.GetManifest(context.Background(), f.Objects, f.Project.ID)
	if err == nil {
		return man.Refs["refs/heads/main"]
	}
	rc, _, err := f.Objects.Get(context.Background(), objstore.RepoKey(f.Project.ID))
	testenv.Must(t, err)
	defer rc.Close()
	dir := t.TempDir()
	_, err = archive.ExtractTarGz(rc, dir, archive.ExtractOptions{})
	testenv.Must(t, err)
	out, err := exec.Command("git", "--git-dir", dir, "rev-parse", "refs/heads/main").Output()
	testenv.Must(t, err)
	return strings.TrimSpace(string(out))
}

// durableETag identifies the durable state: the manifest's ETag and the
// archive's.
func durableETag(ctx context.Context, f *fx) (string, error) {
	base, err := f.Objects.Head(ctx, objstore.RepoKey(f.Project.ID))
	if err != nil {
		return "", err
	}
	man, err := f.Objects.Head(ctx, objstore.RepoManifestKey(f.Project.ID))
	if err != nil && !errors.Is(err, objstore.ErrNotExist) {
		return "", err
	}
	return man.ETag + "/" + base.ETag, nil
}

func countRows(t *testing.T, f *fx, source string) int {
	t.Helper()
	cps, err := f.Store.ListCheckpoints(context.Background(), f.Project.ID, 1000)
	testenv.Must(t, err)
	n := 0
	for _, cp := range cps {
		if source == "" || cp.Source == source {
			n++
		}
	}
	return n
}

func TestAuthMatrix(t *testing.T) {
	t.Parallel()
	f := setup(t)
	infoRefs := f.URL + "/api/projects/" + f.Project.ID + "/git/info/refs?service=git-upload-pack"
	basic := func(k string) string {
		req, _ := http.NewRequest("GET", "/", nil)
		req.SetBasicAuth("x", k)
		return req.Header.Get("Authorization")
	}
	cases := []struct {
		name, auth string
		status     int
	}{
		{"no credentials", "", 401},
		{"basic bad key", basic("svc_sk_bogus"), 401},
		{"bearer bad key", "Bearer svc_sk_bogus", 401},
		{"basic runtime token of the project (its pod)", basic(f.RuntimeToken), 200},
		{"bearer runtime token of the project (its pod)", "Bearer " + f.RuntimeToken, 200},
		{"runtime token of another project", "Bearer " + runtimetoken.Mint([]byte(servertest.RuntimeSecret), "prj_other"), 401},
		{"forged runtime token", "Bearer " + runtimetoken.Mint([]byte("wrong"), f.Project.ID), 401},
		{"basic other workspace", basic(f.OtherKey), 403},
		{"bearer other workspace", "Bearer " + f.OtherKey, 403},
		{"basic member", basic(f.Key), 200},
		{"bearer member", "Bearer " + f.Key, 200},
	}
	for _, tc := range cases {
		req, _ := http.NewRequest("GET", infoRefs, nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		testenv.Must(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, resp.StatusCode, body, tc.status)
		}
		if tc.status == 401 && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic ") {
			t.Errorf("%s: no WWW-Authenticate challenge", tc.name)
		}
		if tc.status == 200 && (resp.Header.Get("Content-Type") != "application/x-git-upload-pack-advertisement" ||
			!bytes.HasPrefix(body, []byte("001e# service=git-upload-pack\n0000"))) {
			t.Errorf("%s: advertisement %q %q", tc.name, resp.Header.Get("Content-Type"), body)
		}
	}
	// The real client without credentials fails cleanly.
	c := newClient(t)
	out, err := c.run("", "clone", f.remote(""), filepath.Join(t.TempDir(), "x"))
	if err == nil || !strings.Contains(out, "Authentication failed") && !strings.Contains(out, "could not read Username") {
		t.Fatalf("clone without key: %v %s", err, out)
	}
}

func pkt(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }

func TestHostileAndGzipRequests(t *testing.T) {
	t.Parallel()
	f := setup(t)
	base := f.URL + "/api/projects/" + f.Project.ID + "/git"
	do := func(method, u string, body []byte, hdr map[string]string) (int, []byte) {
		req, _ := http.NewRequest(method, u, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+f.Key)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		testenv.Must(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	for _, svc := range []string{"--upload-pack=touch /tmp/x", "git-upload-archive", "", "upload-pack"} {
		if st, b := do("GET", base+"/info/refs?service="+url.QueryEscape(svc), nil, nil); st != 400 {
			t.Errorf("service %q: %d %s", svc, st, b)
		}
	}
	if st, _ := do("POST", base+"/git-upload-pack", []byte("0000"), map[string]string{"Content-Type": "text/plain"}); st != 415 {
		t.Errorf("wrong content type: %d", st)
	}
	if st, _ := do("POST", base+"/git-upload-pack", []byte("0000"), map[string]string{
		"Content-Type": "application/x-git-upload-pack-request", "Content-Encoding": "br"}); st != 415 {
		t.Errorf("unknown encoding: %d", st)
	}
	if st, _ := do("POST", base+"/git-upload-pack", []byte("not gzip"), map[string]string{
		"Content-Type": "application/x-git-upload-pack-request", "Content-Encoding": "gzip"}); st != 400 {
		t.Errorf("bad gzip: %d", st)
	}
	// A gzip-compressed protocol v2 ls-refs request is answered.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	io.WriteString(zw, pkt("command=ls-refs\n")+"0001"+pkt("peel\n")+pkt("ref-prefix refs/heads/\n")+"0000")
	zw.Close()
	st, b := do("POST", base+"/git-upload-pack", gz.Bytes(), map[string]string{
		"Content-Type": "application/x-git-upload-pack-request", "Content-Encoding": "gzip", "Git-Protocol": "version=2"})
	if st != 200 || !strings.Contains(string(b), f.w.Head()+" refs/heads/main") {
		t.Fatalf("gzip ls-refs: %d %q", st, b)
	}
	// An option-like Git-Protocol value is ignored, not passed on.
	st, b = do("GET", base+"/info/refs?service=git-upload-pack", nil, map[string]string{"Git-Protocol": "version=2 --upload-pack=x"})
	if st != 200 || !bytes.HasPrefix(b, []byte("001e# service=git-upload-pack")) {
		t.Fatalf("hostile Git-Protocol: %d %q", st, b)
	}
}

// A dual_shadow project's chain stays bounded: the push that finds
// MaxIncrements listed writes the whole archive and a manifest without
// increments (the dropped ones retired), and the history reads whole.
func TestDualShadowChainIsCompacted(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	_, err := f.Store.SetSyncMode(ctx, f.Project.ID, syncmode.DualShadow)
	testenv.Must(t, err)
	c := newClient(t)
	dst := filepath.Join(t.TempDir(), "clone")
	c.must("", "clone", f.remote(f.RuntimeToken), dst)
	var head string
	push := func(i int) {
		testenv.Must(t, os.WriteFile(filepath.Join(dst, "turn.txt"), []byte(fmt.Sprint(i)), 0o644))
		c.must(dst, "add", "-A")
		c.must(dst, "commit", "-q", "-m", fmt.Sprintf("turn %d", i))
		head = c.must(dst, "rev-parse", "HEAD")
		c.must(dst, "push", "-q", "origin", "main")
	}
	push(0) // the archive once, then the manifest
	first, err := f.Objects.Head(ctx, objstore.RepoKey(f.Project.ID))
	testenv.Must(t, err)
	for i := 1; i <= gitserver.MaxIncrements+1; i++ {
		push(i)
	}
	man, _, err := repoarchive.GetManifest(ctx, f.Objects, f.Project.ID)
	testenv.Must(t, err)
	base, err := f.Objects.Head(ctx, objstore.RepoKey(f.Project.ID))
	testenv.Must(t, err)
	if base.ETag == first.ETag || len(man.Increments) != 0 || len(man.Retired) != gitserver.MaxIncrements ||
		man.Refs["refs/heads/main"] != head || man.Base.ETag != base.ETag {
		t.Fatalf("after %d pushes: base rewritten %v, %d increments, %d retired, main %s (want %s)",
			gitserver.MaxIncrements+1, base.ETag != first.ETag, len(man.Increments), len(man.Retired), man.Refs["refs/heads/main"], head)
	}
	clone := filepath.Join(t.TempDir(), "again")
	c.must("", "clone", f.remote(f.RuntimeToken), clone)
	if got := c.must(clone, "rev-parse", "HEAD"); got != head {
		t.Fatalf("clone after the compaction: HEAD %s, want %s", got, head)
	}
}
