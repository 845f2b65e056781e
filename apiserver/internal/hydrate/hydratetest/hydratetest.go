// Package hydratetest builds, for tests and benchmarks, project repositories
// the way the pod does (a work tree on branch main, commits by the agent
// identity, annotated publish tags) and persists them as the pod persists
// them: shared/repoarchive's layout put at <projectId>/repo.git.tar.gz. It
// also has a Store wrapper that counts calls.
package hydratetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/gitrun"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/repoarchive"
)

// Work is a pod-like work tree with its .git.
type Work struct {
	t      testing.TB
	Dir    string
	runner *gitrun.Runner
	clock  time.Time
}

// Identity of test commits (the pod's agent identity).
const (
	AuthorName  = "svc agent"
	AuthorEmail = "agent@svc.invalid"
)

// NewWork initialises a repository on branch main in a temp dir, configured
// as the pod configures its own.
func NewWork(t testing.TB) *Work {
	t.Helper()
	w := &Work{t: t, Dir: t.TempDir(), runner: &gitrun.Runner{}, clock: time.Unix(1_700_000_000, 0)}
	w.Git("init", "-q", "-b", "main")
	for _, kv := range [][2]string{{"gc.auto", "0"}, {"core.hooksPath", "/dev/null"}, {"commit.gpgSign", "false"},
		{"user.name", AuthorName}, {"user.email", AuthorEmail}} {
		w.Git("config", "--local", kv[0], kv[1])
	}
	return w
}

// Git runs git in the work tree and returns its trimmed output; arguments
// are test literals.
func (w *Work) Git(args ...string) string {
	w.t.Helper()
	return w.GitIn(nil, args...)
}

// GitIn is Git with stdin.
func (w *Work) GitIn(stdin io.Reader, args ...string) string {
	w.t.Helper()
	cmd := w.runner.Command().Dir(w.Dir).Env(w.identity()...)
	for _, a := range args {
		cmd.AddArgs(gitrun.Arg(a))
	}
	if stdin != nil {
		cmd.Stdin(stdin)
	}
	out, err := cmd.String(context.Background())
	if err != nil {
		w.t.Fatalf("git %v: %v", args, err)
	}
	return out
}

func (w *Work) identity() []string {
	d := w.clock.Format(time.RFC3339)
	return []string{"GIT_AUTHOR_NAME=" + AuthorName, "GIT_AUTHOR_EMAIL=" + AuthorEmail,
		"GIT_COMMITTER_NAME=" + AuthorName, "GIT_COMMITTER_EMAIL=" + AuthorEmail,
		"GIT_AUTHOR_DATE=" + d, "GIT_COMMITTER_DATE=" + d}
}

// Write writes files (relative path → content) into the work tree.
func (w *Work) Write(files map[string]string) {
	w.t.Helper()
	for rel, content := range files {
		p := filepath.Join(w.Dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			w.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			w.t.Fatal(err)
		}
	}
}

// Commit writes files, stages everything and commits as the pod does;
// it returns the new sha. Each commit is one second after the previous one.
func (w *Work) Commit(msg string, files map[string]string) string {
	w.t.Helper()
	w.clock = w.clock.Add(time.Second)
	w.Write(files)
	w.Git("add", "-A")
	w.Git("commit", "-q", "--no-verify", "--allow-empty", "--cleanup=verbatim", "--message="+msg)
	return w.Head()
}

// Remove deletes a path from the work tree.
func (w *Work) Remove(rel string) {
	w.t.Helper()
	if err := os.Remove(filepath.Join(w.Dir, filepath.FromSlash(rel))); err != nil {
		w.t.Fatal(err)
	}
}

// Head returns the sha of HEAD.
func (w *Work) Head() string { return w.Git("rev-parse", "HEAD") }

// Tag creates an annotated tag at HEAD (publish tags are annotated).
func (w *Work) Tag(name, msg string) {
	w.t.Helper()
	w.Git("tag", "-a", "--message="+msg, name, "HEAD")
}

// GitDir is the work tree's .git.
func (w *Work) GitDir() string { return filepath.Join(w.Dir, ".git") }

// Generate appends n commits quickly (git fast-import), each changing one
// file of about fileBytes bytes, on branch main. With random content the
// files do not compress (to build a .git of a given size).
func (w *Work) Generate(n, fileBytes int, random bool) {
	w.t.Helper()
	var b bytes.Buffer
	parent := ""
	if out, err := w.runner.Command("rev-parse", "--verify", "-q", "HEAD").Dir(w.Dir).String(context.Background()); err == nil {
		parent = out
	}
	filler := strings.Repeat("x", max(fileBytes-64, 0))
	for i := 0; i < n; i++ {
		w.clock = w.clock.Add(time.Second)
		body := filler
		if random {
			rb := make([]byte, len(filler))
			_, _ = rand.Read(rb)
			body = string(rb) // binary: incompressible
		}
		content := fmt.Sprintf("file %d of turn %d\n%s\n", i%50, i, body)
		msg := fmt.Sprintf("turn %d", i)
		fmt.Fprintf(&b, "commit refs/heads/main\nmark :%d\n", i+1)
		fmt.Fprintf(&b, "author %s <%s> %d +0000\ncommitter %s <%s> %d +0000\n", AuthorName, AuthorEmail, w.clock.Unix(), AuthorName, AuthorEmail, w.clock.Unix())
		fmt.Fprintf(&b, "data %d\n%s\n", len(msg), msg)
		if i == 0 && parent != "" {
			fmt.Fprintf(&b, "from %s\n", parent)
		}
		fmt.Fprintf(&b, "M 100644 inline src/file%03d.txt\ndata %d\n%s\n", i%50, len(content), content)
	}
	b.WriteString("done\n")
	w.GitIn(&b, "fast-import", "--quiet", "--done")
	w.Git("reset", "-q", "--hard", "main")
}

// Archive returns repo.git.tar.gz of the work tree's .git, exactly as the
// pod builds it.
func (w *Work) Archive() []byte {
	w.t.Helper()
	var buf bytes.Buffer
	if _, err := repoarchive.Create(&buf, w.GitDir(), repoarchive.Options{}); err != nil {
		w.t.Fatal(err)
	}
	return buf.Bytes()
}

// Persist puts the archive at <projectID>/repo.git.tar.gz.
func (w *Work) Persist(st objstore.Store, projectID string) objstore.ObjectInfo {
	w.t.Helper()
	return PutObject(w.t, st, projectID, w.Archive())
}

// PutObject stores b as the durable object of projectID.
func PutObject(t testing.TB, st objstore.Store, projectID string, b []byte) objstore.ObjectInfo {
	t.Helper()
	info, err := st.Put(context.Background(), objstore.RepoKey(projectID), bytes.NewReader(b), int64(len(b)),
		objstore.PutOptions{ContentType: "application/gzip"})
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// CountingStore wraps a Store and counts Head and Get calls, and the
// bytes its callers read from the bodies of Gets (GotBytes: what a read
// fetched from the object store).
type CountingStore struct {
	objstore.Store
	Heads, Gets atomic.Int64
	GotBytes    atomic.Int64
	// BeforeGet, when set, runs before each Get (tests hold a download).
	BeforeGet func()
}

// Head counts and delegates.
func (c *CountingStore) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	c.Heads.Add(1)
	return c.Store.Head(ctx, key)
}

// Get counts and delegates.
func (c *CountingStore) Get(ctx context.Context, key string) (io.ReadCloser, objstore.ObjectInfo, error) {
	c.Gets.Add(1)
	if c.BeforeGet != nil {
		c.BeforeGet()
	}
	rc, info, err := c.Store.Get(ctx, key)
	if err != nil {
		return rc, info, err
	}
	return &countedBody{ReadCloser: rc, n: &c.GotBytes}, info, nil
}

// countedBody adds the bytes read from a Get's body to n.
type countedBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}
