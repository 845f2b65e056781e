// Package checkpointreads serves the checkpoint reads of spec 4.3 from the
// hydrated copy of a project's durable .git (internal/hydrate):
//
//	GET /api/projects/:id/checkpoints/graph          commits newest first, tags, Published badge, cursor pagination
//	GET /api/projects/:id/checkpoints/commits/:sha   one commit with its changed files
//	GET /api/projects/:id/checkpoints/diff?from=&to= unified diff, capped
//	GET /api/projects/:id/checkpoints/status         HEAD, sync mode, last row, durable object, publish
//
// Every read first refreshes the copy (one ETag probe; a download only when
// the object changed). A sha or ref from the caller is validated before it
// reaches git, and reaches it only through gitrun's dynamic arguments.
// Authentication (API key of a member of the project's workspace) is the
// routes' middleware.
package checkpointreads

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/svc-dev/svc/apiserver/internal/apierr"
	"github.com/svc-dev/svc/apiserver/internal/httpmw"
	"github.com/svc-dev/svc/apiserver/internal/hydrate"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/settings"
)

// Defaults.
const (
	DefaultLimit        = 50
	MaxLimit            = 500
	DefaultMaxDiffBytes = 1 << 20
	MaxFiles            = 5000
)

// API holds the handlers' dependencies.
type API struct {
	Hydrate *hydrate.Manager
	Store   *store.Store
	// Objects serves the S3 read source (docs/sync-modes.md §5).
	Objects objstore.Store
	// Runtime reaches the pod for a rollback; nil leaves Restore unmounted.
	Runtime Runtime
	Log     *zap.Logger
	// MaxDiffBytes caps a diff body (default DefaultMaxDiffBytes).
	MaxDiffBytes int
	Now          func() time.Time
}

// WithDefaults fills the zero options and returns a; the server's route
// table mounts Graph, Commit, Diff and Status behind APIKey and
// ProjectMember on the "id" parameter.
func (a *API) WithDefaults() *API {
	a.defaults()
	return a
}

func (a *API) defaults() {
	if a.Log == nil {
		a.Log = zap.NewNop()
	}
	if a.Now == nil {
		a.Now = time.Now
	}
	a.MaxDiffBytes = settings.PositiveOr(a.MaxDiffBytes, DefaultMaxDiffBytes)
}

// acquire refreshes and opens the project's copy, setting the hydrate
// headers on h (nil: none).
func (a *API) acquire(ctx context.Context, projectID string, h http.Header) (*hydrate.Repo, error) {
	r, err := a.Hydrate.Acquire(ctx, projectID)
	if err != nil {
		return nil, hydrate.APIError(err)
	}
	if h != nil {
		hydrate.SetHeaders(h, r)
	}
	return r, nil
}

// acquireAt is acquire and resolveNamed(rev, notFound) in the acquired
// repository; the caller releases the repository when err is nil.
func (a *API) acquireAt(ctx context.Context, projectID string, h http.Header, rev, notFound string) (*hydrate.Repo, string, error) {
	r, err := a.acquire(ctx, projectID, h)
	if err != nil {
		return nil, "", err
	}
	sha, err := resolveNamed(ctx, r, rev, notFound)
	if err != nil {
		r.Release()
		return nil, "", err
	}
	return r, sha, nil
}

// GraphResponse is the body of GET …/checkpoints/graph.
type GraphResponse struct {
	Head       string   `json:"head"`
	Branch     string   `json:"branch"`
	Commits    []Commit `json:"commits"`
	NextCursor string   `json:"nextCursor,omitempty"`
}

// Graph lists the commits reachable from any ref, newest first (date
// order, parents before children never). ?limit= (default 50, max 500);
// ?cursor= is the nextCursor of the previous page: the next page starts
// after the last commit shown, so commits added in between do not shift it.
func (a *API) Graph(c echo.Context) error {
	resp, err := a.ReadGraph(c.Request().Context(), httpmw.ProjectFrom(c).ID, c.QueryParam("limit"), c.QueryParam("cursor"), c.Response().Header())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, resp)
}

// ReadGraph is Graph without HTTP (the console renders it): limit and cursor
// are the query parameters as given ("" for the defaults); the hydrate
// headers go to h when it is not nil.
func (a *API) ReadGraph(ctx context.Context, projectID, limitParam, cursor string, h http.Header) (GraphResponse, error) {
	a.defaults()
	limit := DefaultLimit
	if v := limitParam; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxLimit {
			return GraphResponse{}, apierr.BadRequest("invalid_limit", fmt.Sprintf("limit must be an integer from 1 to %d.", MaxLimit))
		}
		limit = n
	}
	after := ""
	if v := cursor; v != "" {
		b, err := base64.RawURLEncoding.DecodeString(v)
		if err != nil || !validSHA(string(b)) || (len(b) != 40 && len(b) != 64) {
			return GraphResponse{}, apierr.BadRequest("invalid_cursor", "cursor must be the nextCursor of a previous page.")
		}
		after = string(b)
	}
	r, err := a.acquire(ctx, projectID, h)
	if err != nil {
		return GraphResponse{}, err
	}
	defer r.Release()

	// HEAD and the tags are read while the log runs (each is one git
	// process; on an unchanged object they are most of a read's cost).
	var head, branch string
	var tags map[string][]string
	side, sctx := errgroup.WithContext(ctx)
	side.Go(func() (err error) { head, branch, err = headInfo(sctx, r); return err })
	side.Go(func() (err error) { tags, err = tagMap(sctx, r); return err })
	resp := GraphResponse{Commits: []Commit{}}
	var commits []Commit
	defer side.Wait() // on the error paths too, before the copy is released
	if after == "" {
		out, err := r.Git("log", "--all", "--date-order", logFormat).AddOptionValue("--max-count", strconv.Itoa(limit+1)).Output(ctx)
		if err != nil {
			return GraphResponse{}, apierr.Internal(err)
		}
		if commits, err = parseLog(out); err != nil {
			return GraphResponse{}, apierr.Internal(err)
		}
	} else {
		col := &lineCollector{after: after, limit: limit + 1}
		err := r.Git("rev-list", "--all", "--date-order").Stdout(col).Run(ctx)
		if err != nil && !col.done {
			return GraphResponse{}, apierr.Internal(err)
		}
		if !col.found {
			return GraphResponse{}, apierr.BadRequest("invalid_cursor", "The cursor's commit is no longer in the repository; start again without a cursor.")
		}
		if len(col.shas) > 0 {
			out, err := r.Git("log", "--no-walk=unsorted", "--stdin", logFormat).
				Stdin(strings.NewReader(strings.Join(col.shas, "\n") + "\n")).Output(ctx)
			if err != nil {
				return GraphResponse{}, apierr.Internal(err)
			}
			if commits, err = parseLog(out); err != nil {
				return GraphResponse{}, apierr.Internal(err)
			}
		}
	}
	if err := side.Wait(); err != nil {
		return GraphResponse{}, apierr.Internal(err)
	}
	resp.Head, resp.Branch = head, branch
	if len(commits) > limit {
		commits = commits[:limit]
		resp.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(commits[limit-1].SHA))
	}
	decorate(commits, tags)
	if commits != nil {
		resp.Commits = commits
	}
	return resp, nil
}

// CommitResponse is the body of GET …/checkpoints/commits/:sha.
type CommitResponse struct {
	Commit
	Files          []FileChange `json:"files"`
	FilesTruncated bool         `json:"filesTruncated,omitempty"`
	Stats          CommitStats  `json:"stats"`
}

// CommitStats sums Files.
type CommitStats struct {
	FilesChanged int `json:"filesChanged"`
	Additions    int `json:"additions"`
	Deletions    int `json:"deletions"`
}

// Commit returns one commit with the files it changed against its first
// parent; binary files are marked binary and carry no line counts.
func (a *API) Commit(c echo.Context) error {
	resp, err := a.ReadCommit(c.Request().Context(), httpmw.ProjectFrom(c).ID, c.Param("sha"), c.Response().Header())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, resp)
}

// ReadCommit is Commit without HTTP.
func (a *API) ReadCommit(ctx context.Context, projectID, sha string, h http.Header) (CommitResponse, error) {
	a.defaults()
	sha = strings.ToLower(sha)
	if !validSHA(sha) {
		return CommitResponse{}, invalidSHA("sha", sha)
	}
	r, full, err := a.acquireAt(ctx, projectID, h, sha, fmt.Sprintf("No commit %s in the project's repository.", sha))
	if err != nil {
		return CommitResponse{}, err
	}
	defer r.Release()
	out, err := r.Git("log", "-1", logFormat).AddDynamic(full).Output(ctx)
	if err != nil {
		return CommitResponse{}, apierr.Internal(err)
	}
	commits, err := parseLog(out)
	if err != nil || len(commits) != 1 {
		return CommitResponse{}, apierr.Internal(fmt.Errorf("checkpointreads: reading commit %s: %v", full, err))
	}
	tags, err := tagMap(ctx, r)
	if err != nil {
		return CommitResponse{}, apierr.Internal(err)
	}
	decorate(commits, tags)
	resp := CommitResponse{Commit: commits[0]}
	parent := ""
	if len(resp.Parents) > 0 {
		parent = resp.Parents[0]
	}
	resp.Files, resp.FilesTruncated, err = changedFiles(ctx, r, full, parent, MaxFiles)
	if err != nil {
		return CommitResponse{}, apierr.Internal(err)
	}
	if resp.Files == nil {
		resp.Files = []FileChange{}
	}
	for _, f := range resp.Files {
		resp.Stats.FilesChanged++
		resp.Stats.Additions += f.Additions
		resp.Stats.Deletions += f.Deletions
	}
	return resp, nil
}

// DiffResponse is the body of GET …/checkpoints/diff.
type DiffResponse struct {
	From      string `json:"from"` // "" for the empty tree (to is a root commit)
	To        string `json:"to"`
	Diff      string `json:"diff"`
	Truncated bool   `json:"truncated"`
	// MaxBytes is the cap the diff was cut at when Truncated.
	MaxBytes int `json:"maxBytes"`
}

// TruncationMarker ends a diff cut at the size cap.
const TruncationMarker = "\n[svc: diff truncated at %d bytes; request a narrower range with from= and to=]\n"

// Diff returns the unified diff from..to. to defaults to HEAD; from
// defaults to to's first parent (the empty tree for a root commit).
func (a *API) Diff(c echo.Context) error {
	resp, err := a.ReadDiff(c.Request().Context(), httpmw.ProjectFrom(c).ID, c.QueryParam("from"), c.QueryParam("to"), c.Response().Header())
	if err != nil {
		return err
	}
	if resp.Truncated {
		c.Response().Header().Set("X-Svc-Diff-Truncated", "true")
	}
	return c.JSON(http.StatusOK, resp)
}

// ReadDiff is Diff without HTTP.
func (a *API) ReadDiff(ctx context.Context, projectID, from, to string, h http.Header) (DiffResponse, error) {
	a.defaults()
	if to == "" {
		to = "HEAD"
	}
	if !validRev(to) {
		return DiffResponse{}, invalidRev("to")
	}
	if from != "" && !validRev(from) {
		return DiffResponse{}, invalidRev("from")
	}
	r, toSHA, err := a.acquireAt(ctx, projectID, h, to, fmt.Sprintf("to=%s does not name a commit of the project's repository.", to))
	if err != nil {
		return DiffResponse{}, err
	}
	defer r.Release()
	fromSHA := ""
	if from != "" {
		fromSHA, err = resolveNamed(ctx, r, from, fmt.Sprintf("from=%s does not name a commit of the project's repository.", from))
		if err != nil {
			return DiffResponse{}, err
		}
	} else {
		p, err := resolve(ctx, r, toSHA+"^")
		if err != nil && !errors.Is(err, errNoCommit) {
			return DiffResponse{}, apierr.Internal(err)
		}
		fromSHA = p
	}
	cmd := r.Git("diff-tree", "-p", "-r", "--no-commit-id", "--no-ext-diff", "--no-textconv", "--no-color", "--full-index")
	if fromSHA == "" {
		cmd.AddArgs("--root").AddDynamic(toSHA)
	} else {
		cmd.AddDynamic(fromSHA, toSHA)
	}
	w := &capWriter{max: a.MaxDiffBytes}
	if err := cmd.Stdout(w).Run(ctx); err != nil && !w.truncated {
		return DiffResponse{}, apierr.Internal(err)
	}
	resp := DiffResponse{From: fromSHA, To: toSHA, Diff: w.buf.String(), Truncated: w.truncated, MaxBytes: a.MaxDiffBytes}
	if w.truncated {
		resp.Diff += fmt.Sprintf(TruncationMarker, a.MaxDiffBytes)
	}
	return resp, nil
}

// StatusResponse is the body of GET …/checkpoints/status.
type StatusResponse struct {
	ProjectID string `json:"projectId"`
	Head      string `json:"head"`
	Branch    string `json:"branch"`
	SyncMode  string `json:"syncMode"`
	// ReadSource is where the project's current files are read from: s3
	// in s3 and dual_shadow, git in git_only (docs/sync-modes.md §5).
	ReadSource     string            `json:"readSource"`
	Source         *SourceStatus     `json:"source,omitempty"`
	LastCheckpoint *store.Checkpoint `json:"lastCheckpoint"`
	Durable        DurableStatus     `json:"durable"`
	Published      *PublishedStatus  `json:"published"`
}

// DurableStatus describes <projectId>/repo.git.tar.gz and this replica's copy.
type DurableStatus struct {
	Exists       bool       `json:"exists"`
	ETag         string     `json:"etag,omitempty"`
	Size         int64      `json:"size,omitempty"`
	LastModified *time.Time `json:"lastModified,omitempty"`
	AgeSeconds   *float64   `json:"ageSeconds,omitempty"`
	HydratedAt   *time.Time `json:"hydratedAt,omitempty"`
	Stale        bool       `json:"stale"`
	Error        string     `json:"error,omitempty"`
}

// PublishedStatus is the latest publish (spec 10.4.3).
type PublishedStatus struct {
	SHA string `json:"sha"`
	Tag string `json:"tag"`
}

// Status reports the project's sync state. A project without a durable
// object yet answers 200 with durable.exists false (that is a state worth
// reporting, not an error); other hydrate failures are errors as for every
// read, unless a stale copy can be reported.
func (a *API) Status(c echo.Context) error {
	resp, err := a.ReadStatus(c.Request().Context(), httpmw.ProjectFrom(c), c.Response().Header())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, resp)
}

// ReadStatus is Status without HTTP.
func (a *API) ReadStatus(ctx context.Context, proj store.Project, h http.Header) (StatusResponse, error) {
	a.defaults()
	resp := StatusResponse{ProjectID: proj.ID, SyncMode: string(proj.CloudSyncMode), ReadSource: ReadSource(proj)}
	if h != nil {
		h.Set(ReadSourceHeader, resp.ReadSource)
	}
	if a.Objects != nil {
		src, err := SourceHead(ctx, a.Objects, proj.ID)
		if err != nil {
			return StatusResponse{}, apierr.Unavailable(err)
		}
		resp.Source = &src
	}
	if proj.PublishedCommitSHA != "" || proj.PublishedTag != "" {
		resp.Published = &PublishedStatus{SHA: proj.PublishedCommitSHA, Tag: proj.PublishedTag}
	}
	cps, err := a.Store.ListCheckpoints(ctx, proj.ID, 1)
	if err != nil {
		return StatusResponse{}, apierr.Internal(err)
	}
	if len(cps) == 1 {
		resp.LastCheckpoint = &cps[0]
	}
	r, err := a.Hydrate.Acquire(ctx, proj.ID)
	if errors.Is(err, hydrate.ErrNotFound) {
		return resp, nil
	}
	if err != nil {
		return StatusResponse{}, hydrate.APIError(err)
	}
	defer r.Release()
	if h != nil {
		hydrate.SetHeaders(h, r)
	}
	resp.Head, resp.Branch, err = headInfo(ctx, r)
	if err != nil {
		return StatusResponse{}, apierr.Internal(err)
	}
	d := &resp.Durable
	d.Exists, d.ETag, d.Size, d.Stale = true, r.Object.ETag, r.Object.Size, r.Stale
	if r.Stale {
		d.Error = hydrate.ErrorCode(r.StaleErr)
	}
	if !r.Object.LastModified.IsZero() {
		lm := r.Object.LastModified.UTC()
		age := a.Now().Sub(lm).Seconds()
		d.LastModified, d.AgeSeconds = &lm, &age
	}
	ha := r.HydratedAt.UTC()
	d.HydratedAt = &ha
	return resp, nil
}
