package e2e

import (
	"context"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svc-dev/svc/shared/objstore"
	s3store "github.com/svc-dev/svc/shared/objstore/s3"
)

// The API is hydrate-only outside dual_shadow (spec 10.1.3): a
// push with the project's own runtime token to a git_only or s3 project
// is refused with a protocol ERR line naming the mode, the durable
// repo.git.tar.gz keeps its ETag, and the running pod still persists its
// next turn (its fenced persist is not fenced off).
func TestPodPushRefusedOutsideDualShadow(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"git_only", "s3"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			m := newModeEnv(t)
			m.setMode(mode)
			p := m.startPod(mode, "")
			p.turn(t, map[string][]byte{"index.html": []byte("one\n")})
			objs, err := s3store.New(context.Background(), s3store.Config{Endpoint: m.s3.Endpoint, Bucket: m.s3.Bucket,
				AccessKey: m.s3.AccessKey, SecretKey: m.s3.SecretKey})
			must(t, err)
			// The durable .git: its manifest (the commit point) and its archive.
			etag := func() string {
				out := ""
				for _, k := range []string{objstore.RepoManifestKey(m.project), objstore.RepoKey(m.project)} {
					info, err := objs.Head(context.Background(), k)
					if errors.Is(err, objstore.ErrNotExist) {
						out += "(none)/"
						continue
					}
					must(t, err)
					out += info.ETag + "/"
				}
				return out
			}
			before := etag()

			u, _ := url.Parse(m.api.URL + "/api/projects/" + m.project + "/git")
			u.User = url.UserPassword("pod", m.token)
			dir := filepath.Join(t.TempDir(), "clone")
			git := func(args ...string) (string, error) {
				cmd := exec.Command("git", args...)
				cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0",
					"GIT_AUTHOR_NAME=x", "GIT_AUTHOR_EMAIL=x@x.invalid", "GIT_COMMITTER_NAME=x", "GIT_COMMITTER_EMAIL=x@x.invalid")
				out, err := cmd.CombinedOutput()
				return string(out), err
			}
			if out, err := git("clone", "-q", u.String(), dir); err != nil {
				t.Fatalf("clone with the runtime token: %v\n%s", err, out)
			}
			must(t, os.WriteFile(filepath.Join(dir, "pushed.txt"), []byte("x\n"), 0o644))
			if out, err := git("-C", dir, "add", "-A"); err != nil {
				t.Fatalf("add: %v %s", err, out)
			}
			if out, err := git("-C", dir, "commit", "-q", "-m", "pushed"); err != nil {
				t.Fatalf("commit: %v %s", err, out)
			}
			out, err := git("-C", dir, "push", "origin", "HEAD:refs/heads/main")
			if err == nil || !strings.Contains(out, "push is refused") || !strings.Contains(out, "(mode="+mode+")") {
				t.Fatalf("push with the runtime token in %s: err %v\n%s\nwant a refusal naming the mode", mode, err, out)
			}
			if got := etag(); got != before {
				t.Fatalf("the refused push changed repo.git.tar.gz: ETag %s → %s", before, got)
			}
			// The running pod persists its next turn.
			if sha := p.turn(t, map[string][]byte{"index.html": []byte("two\n")}); sha == "" {
				t.Fatal("the pod's next turn made no commit")
			}
			if mode == "git_only" && etag() == before {
				t.Fatal("the git_only pod's next turn was not persisted")
			}
			if strings.Contains(p.logs.String(), "fenced") {
				t.Fatalf("the pod was fenced:\n%s", p.logs.String())
			}
		})
	}
}
