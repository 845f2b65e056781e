package gitsync

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/svc-dev/svc/shared/gitrun"
	"github.com/svc-dev/svc/shared/wire"
)

// Origin is the API's git endpoint of a dual_shadow project
// (docs/sync-modes.md §2): the pod pushes each turn to it and fetches from
// it at cold start. The runtime token travels per call in
// GIT_CONFIG_PARAMETERS; nothing is written to .git/config.
type Origin struct {
	APIURL, ProjectID, Token string
	// Timeout bounds one push or fetch (default 60s).
	Timeout time.Duration
	// Epoch, when set, is this pod's ownership epoch, sent with every call
	// (wire.HeaderOwnerEpoch): the API refuses the push of a pod that no
	// longer owns the project with 409 (ErrOriginFenced).
	Epoch func() int64
}

// ErrOriginFenced: the origin refused a push because another pod owns the
// project (docs/sync-modes.md §11); unlike a transient failure it fences.
var ErrOriginFenced = errors.New("gitsync: the API origin refused the push: another pod owns this project")

// URL is <api>/api/projects/<id>/git.
func (o *Origin) URL() string {
	return strings.TrimSuffix(o.APIURL, "/") + "/api/projects/" + url.PathEscape(o.ProjectID) + "/git"
}

func (o *Origin) env() []string {
	kv := [][2]string{
		{"http." + o.URL() + ".extraHeader", "Authorization: Bearer " + o.Token},
		{"credential.helper", ""},
		{"http.lowSpeedLimit", "1"},
		{"http.lowSpeedTime", "30"},
	}
	if o.Epoch != nil {
		if e := o.Epoch(); e > 0 {
			kv = append(kv, [2]string{"http." + o.URL() + ".extraHeader", wire.HeaderOwnerEpoch + ": " + strconv.FormatInt(e, 10)})
		}
	}
	return []string{gitrun.ConfigParameters(kv), "GIT_TERMINAL_PROMPT=0", "GIT_LFS_SKIP_SMUDGE=1"}
}

func (o *Origin) timeout() time.Duration {
	if o.Timeout <= 0 {
		return time.Minute
	}
	return o.Timeout
}

// Push pushes the branch and every tag to the origin. A rejected or failed
// push is an error (the durability step of dual_shadow failed).
func (o *Origin) Push(ctx context.Context, r *Repo) error {
	err := r.Runner.Command("push", "--quiet", "--no-verify", "--porcelain").Dir(r.Dir).Env(o.env()...).
		Timeout(o.timeout()).AddDynamic(o.URL(), "refs/heads/"+Branch+":refs/heads/"+Branch, "refs/tags/*:refs/tags/*").
		Run(ctx)
	if err != nil {
		if refusedAsNotOwner(err) {
			return fmt.Errorf("%w: %w", ErrOriginFenced, err)
		}
		return fmt.Errorf("gitsync: push to origin: %w", err)
	}
	return nil
}

// refusedAsNotOwner recognises the API's 409 answer to a push of a pod
// that no longer owns the project: git reports the status of the refused
// request on stderr ("The requested URL returned error: 409", or "HTTP
// 409" for a failed RPC).
func refusedAsNotOwner(err error) bool {
	var gerr *gitrun.Error
	if !errors.As(err, &gerr) {
		return false
	}
	return strings.Contains(gerr.Stderr, "returned error: 409") || strings.Contains(gerr.Stderr, "HTTP 409")
}

// Fetch fetches the origin's branch and tags into the repository (HEAD's
// branch included). It reports whether the origin had the branch.
func (o *Origin) Fetch(ctx context.Context, r *Repo) (bool, error) {
	err := r.Runner.Command("fetch", "--quiet", "--no-tags", "--update-head-ok").Dir(r.Dir).Env(o.env()...).
		Timeout(o.timeout()).AddDynamic(o.URL(), "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*").Run(ctx)
	if err != nil {
		return false, fmt.Errorf("gitsync: fetch from origin: %w", err)
	}
	head, err := r.Head(ctx)
	return head != "", err
}

// Turn returns the turn number of commit sha: its first-parent depth, the
// seed commit being turn 0 (docs/sync-modes.md §1).
func (r *Repo) Turn(ctx context.Context, sha string) (int64, error) {
	out, err := r.git("rev-list", "--count", "--first-parent").AddDynamic(sha).String(ctx)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil {
		return 0, err
	}
	return n - 1, nil
}

// IsAncestor reports whether a is an ancestor of (or equal to) b.
func (r *Repo) IsAncestor(ctx context.Context, a, b string) bool {
	return r.git("merge-base", "--is-ancestor").AddDynamic(a, b).Run(ctx) == nil
}

// ResetMixed points the index at HEAD and leaves the work tree alone.
func (r *Repo) ResetMixed(ctx context.Context) error {
	return r.git("reset", "-q", "--mixed", "HEAD").Run(ctx)
}

// ResetTreeTo makes the index and the work tree that of commit sha while
// HEAD stays: tracked files are rewritten or removed, untracked files that
// are not ignored are removed, ignored files (node_modules, offloaded
// large files) stay. The next commit is then a rollback to sha.
func (r *Repo) ResetTreeTo(ctx context.Context, sha string) error {
	if _, err := r.git("rev-parse", "--verify", "-q").AddDynamic(sha + "^{commit}").String(ctx); err != nil {
		return fmt.Errorf("%w: %s", ErrUnknownCommit, sha)
	}
	if err := r.git("read-tree", "--reset", "-u").AddDynamic(sha).Run(ctx); err != nil {
		return err
	}
	return r.git("clean", "-q", "-f", "-d").Run(ctx)
}

// Known reports whether sha names a commit of the repository.
func (r *Repo) Known(ctx context.Context, sha string) bool {
	_, err := r.git("rev-parse", "--verify", "-q").AddDynamic(sha + "^{commit}").String(ctx)
	return err == nil
}

// ErrUnknownCommit: a rollback names a commit the repository does not have.
var ErrUnknownCommit = errors.New("gitsync: unknown commit")
