package gitserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/repoarchive"
	"github.com/svc-dev/svc/shared/wire"
)

// persistIncrement makes a dual_shadow push durable for a project with a
// manifest (docs/sync-modes.md §13.7): the objects the push added (a pack
// of what the new refs reach and the old ones do not) become one
// increment, created with If-None-Match "*" under a key that carries the
// pushing pod's epoch, and the manifest — the commit point — is written
// If-Match the version the copy was hydrated from. The push's cost is the
// push, not the repository. It returns the new manifest and the
// increment's key ("" when the push added no object).
func (s *Server) persistIncrement(ctx context.Context, c echo.Context, projectID, gitDir string, before, after map[string]string, manETag string) (objstore.ObjectInfo, string, error) {
	man, minfo, err := repoarchive.GetManifest(ctx, s.Objects, projectID)
	if err != nil {
		return objstore.ObjectInfo{}, "", err
	}
	if minfo.ETag != manETag {
		return objstore.ObjectInfo{}, "", fmt.Errorf("fenced: the durable manifest changed since it was hydrated (%s, now %s): %w",
			manETag, minfo.ETag, objstore.ErrPreconditionFailed)
	}
	epoch, _ := strconv.ParseInt(c.Request().Header.Get(wire.HeaderOwnerEpoch), 10, 64)
	if len(man.Increments) >= MaxIncrements {
		info, err := s.compactPush(ctx, projectID, gitDir, after, man, manETag, epoch)
		return info, "", err
	}
	next := *man
	next.Increments = append([]repoarchive.Increment(nil), man.Increments...)
	next.Version, next.Seq, next.Epoch = repoarchive.RepoManifestVersion, man.Seq+1, epoch
	refs := map[string]string{}
	for name, id := range after {
		if repoarchive.ValidRefName(name) {
			refs[name] = id
		}
	}
	next.Refs = refs
	if head, err := s.gitAt(gitDir, "symbolic-ref", "-q", "HEAD").String(ctx); err == nil {
		if head = strings.TrimSpace(head); strings.HasPrefix(head, "refs/heads/") && repoarchive.ValidRefName(head) {
			next.Head = head
		}
	}
	scratch, err := os.MkdirTemp(filepath.Join(s.Hydrate.Dir(), ".origin"), "inc-")
	if err != nil {
		if err := os.MkdirAll(filepath.Join(s.Hydrate.Dir(), ".origin"), 0o755); err != nil {
			return objstore.ObjectInfo{}, "", err
		}
		if scratch, err = os.MkdirTemp(filepath.Join(s.Hydrate.Dir(), ".origin"), "inc-"); err != nil {
			return objstore.ObjectInfo{}, "", err
		}
	}
	defer os.RemoveAll(scratch)
	pack, err := repoarchive.PackObjects(ctx, s.runner(), gitDir, scratch, repoarchive.Tips(after), repoarchive.Tips(before))
	if err != nil {
		return objstore.ObjectInfo{}, "", err
	}
	var incKey string
	if pack.Objects > 0 {
		var buf bytes.Buffer
		sum, n, err := repoarchive.WriteIncrement(&buf, pack)
		if err != nil {
			return objstore.ObjectInfo{}, "", err
		}
		incKey = objstore.RepoIncrementKey(projectID, epoch, next.Seq, pack.Hash)
		_, err = s.Objects.Put(ctx, incKey, &buf, n, objstore.PutOptions{IfNoneMatch: "*", ContentType: "application/x-tar"})
		if err != nil && !errors.Is(err, objstore.ErrPreconditionFailed) {
			return objstore.ObjectInfo{}, "", fmt.Errorf("put %s: %w", incKey, err)
		}
		next.Increments = append(next.Increments, repoarchive.Increment{Key: incKey, Epoch: epoch, Seq: next.Seq, Bytes: n, SHA256: sum})
	}
	b := next.Marshal()
	info, err := s.Objects.Put(ctx, objstore.RepoManifestKey(projectID), bytes.NewReader(b), int64(len(b)),
		objstore.PutOptions{IfMatch: manETag, ContentType: "application/json"})
	if errors.Is(err, objstore.ErrPreconditionFailed) {
		return info, "", fmt.Errorf("fenced: the durable manifest changed since it was hydrated (IfMatch=%q): %w", manETag, err)
	}
	if err != nil {
		return info, "", err
	}
	s.Log.Info("dual_shadow push made durable as an increment", zap.String("projectId", projectID), zap.String("increment", incKey),
		zap.Int64("seq", next.Seq), zap.String("etag", info.ETag))
	return info, incKey, nil
}

// MaxIncrements bounds the chain of a dual_shadow project: the push that
// finds this many listed writes the whole archive instead (as every push
// did before increments), and the manifest then lists none. The API is
// the only writer of a dual_shadow project's manifest, so this is its
// compaction; increments it drops are deleted RetireGrace after.
const MaxIncrements = 32

// RetireGrace is how long a dropped increment is kept for readers holding
// an older manifest.
const RetireGrace = 15 * time.Minute

// compactPush makes the push durable as a new base and a manifest without
// increments, then deletes the increments an earlier compaction retired
// more than RetireGrace ago.
func (s *Server) compactPush(ctx context.Context, projectID, gitDir string, after map[string]string, man *repoarchive.RepoManifest, manETag string, epoch int64) (objstore.ObjectInfo, error) {
	cur, err := s.Objects.Head(ctx, objstore.RepoKey(projectID))
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	base, err := s.persist(ctx, projectID, gitDir, objstore.PutOptions{ContentType: "application/gzip", IfMatch: cur.ETag})
	if err != nil {
		return base, err
	}
	next := *man
	next.Version, next.Seq, next.Epoch = repoarchive.RepoManifestVersion, man.Seq+1, epoch
	next.Refs = map[string]string{}
	for name, id := range after {
		if repoarchive.ValidRefName(name) {
			next.Refs[name] = id
		}
	}
	next.Base = repoarchive.BaseRef{ETag: base.ETag, Epoch: epoch, Seq: next.Seq, Bytes: base.Size, Refs: next.Refs}
	now := time.Now()
	var gone []string
	next.Retired = nil
	for _, r := range man.Retired {
		if now.Sub(r.At) >= RetireGrace {
			gone = append(gone, r.Key)
		} else {
			next.Retired = append(next.Retired, r)
		}
	}
	for _, inc := range man.Increments {
		next.Retired = append(next.Retired, repoarchive.Retired{Key: inc.Key, At: now})
	}
	next.Increments = nil
	b := next.Marshal()
	info, err := s.Objects.Put(ctx, objstore.RepoManifestKey(projectID), bytes.NewReader(b), int64(len(b)),
		objstore.PutOptions{IfMatch: manETag, ContentType: "application/json"})
	if err != nil {
		return info, fmt.Errorf("put %s: %w", objstore.RepoManifestKey(projectID), err)
	}
	for _, key := range gone { // no manifest names them any more
		if err := s.Objects.Delete(ctx, key); err != nil {
			s.Log.Warn("deleting a retired increment", zap.String("key", key), zap.Error(err))
		}
	}
	s.Log.Info("dual_shadow push compacted the durable .git", zap.String("projectId", projectID), zap.Int("increments", len(man.Increments)))
	return info, nil
}

// createManifest writes the first manifest of a project whose base the
// API just wrote in full (If-None-Match "*"): the base, no increments, the
// pushed refs.
func (s *Server) createManifest(ctx context.Context, c echo.Context, projectID, gitDir string, after map[string]string, base objstore.ObjectInfo) (objstore.ObjectInfo, error) {
	epoch, _ := strconv.ParseInt(c.Request().Header.Get(wire.HeaderOwnerEpoch), 10, 64)
	m := repoarchive.RepoManifest{Version: repoarchive.RepoManifestVersion, Seq: 1, Epoch: epoch, Refs: map[string]string{},
		Base: repoarchive.BaseRef{ETag: base.ETag, Epoch: epoch, Seq: 1, Bytes: base.Size}}
	m.ObjectFormat, _ = repoarchive.ObjectFormat(gitDir)
	for name, id := range after {
		if repoarchive.ValidRefName(name) {
			m.Refs[name] = id
		}
	}
	if head, err := s.gitAt(gitDir, "symbolic-ref", "-q", "HEAD").String(ctx); err == nil {
		if head = strings.TrimSpace(head); strings.HasPrefix(head, "refs/heads/") && repoarchive.ValidRefName(head) {
			m.Head = head
		}
	}
	b := m.Marshal()
	info, err := s.Objects.Put(ctx, objstore.RepoManifestKey(projectID), bytes.NewReader(b), int64(len(b)),
		objstore.PutOptions{IfNoneMatch: "*", ContentType: "application/json"})
	if err != nil {
		return info, fmt.Errorf("create %s: %w", objstore.RepoManifestKey(projectID), err)
	}
	return info, nil
}
