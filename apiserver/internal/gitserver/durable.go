package gitserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/httpmw"
	"github.com/svc-dev/svc/apiserver/internal/hydrate"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/gitrun"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/repoarchive"
	"github.com/svc-dev/svc/shared/wire"
)

// pushRefusal returns why this push is refused, or "" when it is the
// project's pod pushing while the project's row says dual_shadow
// (docs/sync-modes.md §2, §3). The row is the one read for this request
// (Authenticate loads it for the runtime token; it is never cached), so a
// pod whose project was switched to git_only or s3 is refused before
// anything is written: in git_only the pod itself owns repo.git.tar.gz,
// and an API write there would move the ETag its next fenced persist
// expects. The message reaches the client's terminal as "remote error: …".
func (s *Server) pushRefusal(c echo.Context, proj store.Project) string {
	pod := httpmw.PrincipalFrom(c).Runtime()
	switch {
	case proj.CloudSyncMode.AcceptsPodPush() && pod:
		return ""
	case proj.CloudSyncMode.AcceptsPodPush():
		return "push-back is refused: in dual_shadow only the project's pod pushes to this repository (mode=dual_shadow); clone, fetch and pull work"
	case pod:
		return fmt.Sprintf("push is refused: the API is hydrate-only outside dual_shadow and never persists a push (mode=%s); the pod persists its own history", proj.CloudSyncMode)
	}
	return fmt.Sprintf("push-back is refused: the project's pod owns its history and would not keep a pushed commit (mode=%s); clone, fetch and pull work", proj.CloudSyncMode)
}

// projectLocks serialises pushes per project on this replica (fencing
// orders them across replicas).
var projectLocks sync.Map // projectID → *sync.Mutex

func lockProject(id string) func() {
	v, _ := projectLocks.LoadOrStore(id, &sync.Mutex{})
	mu := v.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// gitAt runs git on a bare repository at dir (not necessarily a hydrated
// copy), with the environment hydrate uses.
func (s *Server) gitAt(dir string, args ...gitrun.Arg) *gitrun.Cmd {
	return s.runner().Command(args...).Dir(dir).Env("GIT_DIR="+dir, "GIT_NO_REPLACE_OBJECTS=1", "GIT_ATTR_NOSYSTEM=1")
}

func (s *Server) runner() *gitrun.Runner {
	if s.Runner != nil {
		return s.Runner
	}
	return &gitrun.Runner{}
}

// commandAt is command for a repository outside the hydrate manager.
func (s *Server) commandAt(dir, service, proto string) *gitrun.Cmd {
	var cmd *gitrun.Cmd
	if service == "receive-pack" {
		cmd = s.gitAt(dir, "-c", "receive.fsckObjects=true", "-c", "core.hooksPath=/dev/null", "receive-pack", "--stateless-rpc")
	} else {
		cmd = s.gitAt(dir, "-c", "core.hooksPath=/dev/null", "upload-pack", "--stateless-rpc", "--strict")
	}
	cmd.Timeout(s.Timeout)
	if proto != "" {
		cmd.Env("GIT_PROTOCOL=" + proto)
	}
	return cmd
}

// emptyRepo creates an empty bare repository (branch main) in scratch
// space; cleanup removes it.
func (s *Server) emptyRepo(ctx context.Context) (string, func(), error) {
	base := filepath.Join(s.Hydrate.Dir(), ".origin")
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp(base, "empty-")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	if err := s.runner().Command("init", "--bare", "-q", "-b", "main").AddDynamic(dir).Run(ctx); err != nil {
		cleanup()
		return "", nil, err
	}
	cfg := "[core]\n\trepositoryformatversion = 0\n\tbare = true\n\tlogAllRefUpdates = false\n[gc]\n\tauto = 0\n"
	if err := os.WriteFile(filepath.Join(dir, "config"), []byte(cfg), 0o644); err != nil {
		cleanup()
		return "", nil, err
	}
	_ = os.RemoveAll(filepath.Join(dir, "hooks"))
	return dir, cleanup, nil
}

// durableReceive is receive-pack in dual_shadow (docs/sync-modes.md §2):
// receive into the hydrated copy (or an empty repository), make the result
// durable with a fenced PUT of repo.git.tar.gz, write one row per pushed
// commit, and only then release git's answer. A PUT that fails (a lost
// race, a store error) fails the push with 503 and drops the copy.
func (s *Server) durableReceive(c echo.Context, proj store.Project, body *limitReader, proto string) error {
	ctx := c.Request().Context()
	defer lockProject(proj.ID)()

	put := objstore.PutOptions{ContentType: "application/gzip"}
	var gitDir string
	r, err := s.Hydrate.Acquire(ctx, proj.ID)
	switch {
	case err == nil:
		defer r.Release()
		if r.Stale {
			return unavailable("The project's durable repository cannot be refreshed; retry the push.", r.StaleErr)
		}
		gitDir, put.IfMatch = r.GitDir, r.Object.ETag
	case errors.Is(err, hydrate.ErrNotFound):
		dir, cleanup, eerr := s.emptyRepo(ctx)
		if eerr != nil {
			return wire.Internal(eerr)
		}
		defer cleanup()
		gitDir, put.IfNoneMatch = dir, "*"
	default:
		return hydrate.APIError(err)
	}

	before, err := s.runner().Refs(ctx, gitDir)
	if err != nil {
		return wire.Internal(err)
	}
	var out bytes.Buffer
	err = s.commandAt(gitDir, "receive-pack", proto).AddDynamic(gitDir).Stdin(body).Stdout(&out).Run(ctx)
	if body.exceeded {
		s.Hydrate.Invalidate(proj.ID)
		return wire.Coded("request_too_large",
			fmt.Sprintf("The receive-pack request body exceeds %d bytes.", s.MaxReceiveBytes))
	}
	if err != nil {
		s.Hydrate.Invalidate(proj.ID)
		return wire.Internal(err)
	}
	after, err := s.runner().Refs(ctx, gitDir)
	if err != nil {
		return wire.Internal(err)
	}
	if !repoarchive.SameRefs(before, after) {
		// Checked again after receiving: a pod that lost the project while
		// its push was received makes nothing durable (docs/sync-modes.md §11).
		if err := s.notOwner(c, proj.ID); err != nil {
			s.Hydrate.Invalidate(proj.ID)
			return err
		}
		var info objstore.ObjectInfo
		var incKey string
		if r != nil && r.Object.Key == objstore.RepoManifestKey(proj.ID) {
			info, incKey, err = s.persistIncrement(ctx, c, proj.ID, gitDir, before, after, r.Object.ETag)
		} else {
			info, err = s.persist(ctx, proj.ID, gitDir, put)
			if err == nil {
				// From now on a push writes an increment.
				info, err = s.createManifest(ctx, c, proj.ID, gitDir, after, info)
			}
		}
		if err != nil {
			s.Hydrate.Invalidate(proj.ID)
			s.Log.Warn("dual_shadow push not made durable; refused", zap.String("projectId", proj.ID), zap.Error(err))
			return unavailable("The push could not be made durable; retry it.", err)
		}
		if r != nil {
			s.Hydrate.AdoptIncrement(r, info, incKey)
		}
		s.recordPushed(context.WithoutCancel(ctx), gitDir, proj.ID, before, after)
	}
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, "application/x-git-receive-pack-result")
	noCache(h)
	return c.Blob(http.StatusOK, "application/x-git-receive-pack-result", out.Bytes())
}

func unavailable(msg string, cause error) *wire.Error {
	e := wire.Coded("durable_write_failed", msg)
	e.Headers, e.Cause = map[string]string{"Retry-After": "1"}, cause
	return e
}

// persist archives gitDir in the pod's layout and writes it with the
// fencing condition of put.
func (s *Server) persist(ctx context.Context, projectID, gitDir string, put objstore.PutOptions) (objstore.ObjectInfo, error) {
	f, err := os.CreateTemp(filepath.Join(s.Hydrate.Dir(), ".origin"), "repo-*.tar.gz")
	if err != nil {
		if err := os.MkdirAll(filepath.Join(s.Hydrate.Dir(), ".origin"), 0o755); err != nil {
			return objstore.ObjectInfo{}, err
		}
		if f, err = os.CreateTemp(filepath.Join(s.Hydrate.Dir(), ".origin"), "repo-*.tar.gz"); err != nil {
			return objstore.ObjectInfo{}, err
		}
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := repoarchive.Create(f, gitDir, repoarchive.Options{Level: 1}); err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("archive: %w", err)
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return objstore.ObjectInfo{}, err
	}
	info, err := s.Objects.Put(ctx, objstore.RepoKey(projectID), f, size, put)
	if errors.Is(err, objstore.ErrPreconditionFailed) {
		return info, fmt.Errorf("fenced: the durable repository changed since it was hydrated (IfMatch=%q IfNoneMatch=%q): %w",
			put.IfMatch, put.IfNoneMatch, err)
	}
	if err != nil {
		return info, err
	}
	s.Log.Info("dual_shadow push made durable", zap.String("projectId", projectID), zap.String("key", info.Key),
		zap.Int64("bytes", size), zap.String("etag", info.ETag))
	return info, nil
}

// recordPushed is the post-receive of dual_shadow: one ProjectCheckpoint
// row (source receive-pack) per commit the push added to the first-parent
// line of the project's branch (HEAD), oldest first, each with its turn
// number; a commit pushed only to another ref or tag is not a turn and
// gets none (docs/sync-modes.md §1). A failure is logged: the commits are
// durable, and the next read-hydrate reconciles missing rows.
func (s *Server) recordPushed(ctx context.Context, gitDir, projectID string, before, after map[string]string) {
	ref, _ := s.gitAt(gitDir, "symbolic-ref", "-q", "HEAD").String(ctx)
	head := after[ref]
	if ref == "" || head == "" || before[ref] == head {
		return
	}
	var old []string
	for name, sha := range before {
		if strings.HasPrefix(name, "refs/") {
			old = append(old, sha)
		}
	}
	sort.Strings(old)
	cmd := s.gitAt(gitDir, "rev-list", "--reverse", "--first-parent").AddDynamic(head)
	if len(old) > 0 {
		cmd.AddArgs("--not").AddDynamic(old...)
	}
	out, err := cmd.String(ctx)
	if err != nil {
		s.Log.Warn("listing pushed commits", zap.String("projectId", projectID), zap.Error(err))
		return
	}
	shas := strings.Fields(out)
	if len(shas) == 0 {
		return
	}
	run := func(args ...gitrun.Arg) *gitrun.Cmd { return s.gitAt(gitDir, args...) }
	recs, err := hydrate.CommitRecords(ctx, run, shas)
	if err != nil {
		s.Log.Warn("reading pushed commits", zap.String("projectId", projectID), zap.Error(err))
		return
	}
	turns, err := hydrate.Turns(ctx, run, "HEAD")
	if err != nil {
		s.Log.Warn("reading turn numbers", zap.String("projectId", projectID), zap.Error(err))
	}
	branch, _ := s.gitAt(gitDir, "symbolic-ref", "--short", "-q", "HEAD").String(ctx)
	created := 0
	for _, rec := range recs {
		rec.Branch = branch
		rec.Turn = hydrate.TurnOf(turns, rec.CommitSHA)
		_, ok, err := s.Recorder.RecordCheckpoint(ctx, projectID, rec, SourceReceivePack)
		if err != nil {
			s.Log.Error("recording a pushed checkpoint", zap.String("projectId", projectID), zap.String("sha", rec.CommitSHA), zap.Error(err))
			return
		}
		if ok {
			created++
		}
	}
	s.Log.Info("post-receive: checkpoint rows written", zap.String("projectId", projectID), zap.Int("rows", created))
}
