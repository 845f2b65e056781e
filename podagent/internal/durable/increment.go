package durable

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/ownership"
	"github.com/svc-dev/svc/podagent/internal/testhook"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/repoarchive"
)

// localRefs reads the refs the manifest will name and the branch HEAD
// names. Refs a manifest cannot carry (names git itself would refuse) are
// left out.
func (p *Persister) localRefs(ctx context.Context) (map[string]string, string, error) {
	all, err := p.opts.Runner.Refs(ctx, p.gitDir)
	if err != nil {
		return nil, "", fmt.Errorf("durable: list refs: %w", err)
	}
	refs := make(map[string]string, len(all))
	for name, id := range all {
		if repoarchive.ValidRefName(name) {
			refs[name] = id
		}
	}
	head, err := p.opts.Runner.Command("symbolic-ref", "-q", "HEAD").Env("GIT_DIR=" + p.gitDir).String(ctx)
	if err != nil {
		head = "" // detached or unborn: the manifest names the default branch
	}
	head = strings.TrimSpace(head)
	if !strings.HasPrefix(head, "refs/heads/") || !repoarchive.ValidRefName(head) {
		head = ""
	}
	return refs, head, nil
}

// headTurn is HEAD's first-parent depth (nil when unknown).
func (p *Persister) headTurn(ctx context.Context) *int64 {
	out, err := p.opts.Runner.Command("rev-list", "--count", "--first-parent", "HEAD").Env("GIT_DIR=" + p.gitDir).String(ctx)
	if err != nil {
		return nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil || n < 1 {
		return nil
	}
	n--
	return &n
}

// snapshotIncrement stages the pack of every object reachable from the
// local refs and not from the manifest's (git pack-objects --revs). It
// reports false (with the reason) when the whole base must be written
// instead: the manifest names a tip this repository lacks.
func (p *Persister) snapshotIncrement(ctx context.Context, snap *Snapshot, man *repoarchive.RepoManifest, tmpDir string) (bool, error) {
	if repoarchive.SameRefs(snap.refs, man.Refs) && (snap.head == man.Head || snap.head == "") {
		snap.kind = snapNone
		return true, nil
	}
	dir, err := os.MkdirTemp(tmpDir, "inc-")
	if err != nil {
		return false, err
	}
	pack, err := repoarchive.PackObjects(ctx, p.opts.Runner, p.gitDir, dir, repoarchive.Tips(snap.refs), repoarchive.Tips(man.Refs))
	if err != nil {
		_ = os.RemoveAll(dir)
		return false, err
	}
	if pack.Objects == 0 {
		_ = os.RemoveAll(dir)
		snap.kind = snapRefs
		return true, nil
	}
	snap.pack = pack
	f, err := os.CreateTemp(dir, "inc-*.tar")
	if err != nil {
		snap.Remove()
		return false, err
	}
	snap.Path = f.Name()
	sum, n, err := repoarchive.WriteIncrement(f, pack)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		snap.Remove()
		return false, err
	}
	snap.kind, snap.sha256, snap.Size = snapIncrement, sum, n
	return true, nil
}

// nextManifest is cur (nil: none yet) with the next seq and this pod's
// epoch; the caller fills in what changed.
func (p *Persister) nextManifest(cur *repoarchive.RepoManifest) *repoarchive.RepoManifest {
	next := &repoarchive.RepoManifest{}
	if cur != nil {
		*next = *cur
		next.Increments = append([]repoarchive.Increment(nil), cur.Increments...)
		next.Retired = append([]repoarchive.Retired(nil), cur.Retired...)
	}
	next.Version = repoarchive.RepoManifestVersion
	next.Seq++
	next.Epoch = p.lease.Epoch()
	return next
}

// retire moves incs to the retired list (deleted by the owner after
// RetireGrace, once a manifest no longer lists them).
func retire(retired []repoarchive.Retired, incs []repoarchive.Increment, at time.Time) []repoarchive.Retired {
	for _, inc := range incs {
		retired = append(retired, repoarchive.Retired{Key: inc.Key, At: at})
	}
	return retired
}

// putIncrement creates the increment's object. It needs no fence: until
// a manifest names it, an increment does not exist for any reader, and
// the epoch in its key keeps pods from ever writing the same key. A key
// already there is this pod's own earlier attempt (same epoch, seq and
// pack hash).
func (p *Persister) putIncrement(ctx context.Context, snap *Snapshot, next *repoarchive.RepoManifest) (repoarchive.Increment, error) {
	if err := p.lease.Check(ctx); err != nil {
		return repoarchive.Increment{}, err
	}
	next.Epoch = p.lease.Epoch()
	inc := repoarchive.Increment{
		Key: objstore.RepoIncrementKey(p.opts.ProjectID, next.Epoch, next.Seq, snap.pack.Hash), Epoch: next.Epoch,
		Seq: next.Seq, Bytes: snap.Size, SHA256: snap.sha256,
	}
	body := hookedBody(ownership.FileBody(snap.Path))
	r, size, err := body()
	if err != nil {
		return inc, err
	}
	_, err = p.opts.Store.Put(ctx, inc.Key, r, size, objstore.PutOptions{IfNoneMatch: "*", ContentType: "application/x-tar"})
	r.Close()
	if err != nil && !errors.Is(err, objstore.ErrPreconditionFailed) {
		return inc, fmt.Errorf("durable: put %s: %w", inc.Key, err)
	}
	testhook.Reach(testhook.AfterIncrement)
	return inc, nil
}

// putManifest writes next through the lease, If-Match the manifest this
// pod last wrote or saw: the commit point of a persist.
func (p *Persister) putManifest(ctx context.Context, prev string, next *repoarchive.RepoManifest) (objstore.ObjectInfo, error) {
	b := next.Marshal()
	body := func() (io.ReadCloser, int64, error) { return io.NopCloser(bytes.NewReader(b)), int64(len(b)), nil }
	info, err := p.lease.Put(ctx, p.opts.Store, p.manKey, prev, body, objstore.PutOptions{ContentType: "application/json"})
	if errors.Is(err, ErrFenced) {
		return info, err
	}
	if err != nil {
		return info, fmt.Errorf("durable: put %s: %w", p.manKey, err)
	}
	testhook.Reach(testhook.AfterManifest)
	p.mu.Lock()
	p.man, p.manETag = next, info.ETag
	base := p.etag
	p.mu.Unlock()
	if err := p.saveState(state{ETag: base, ManifestETag: info.ETag}); err != nil {
		p.log.Warn("saving durable state", zap.Error(err))
	}
	return info, nil
}

// Manifest returns a copy of the manifest this pod last wrote, restored
// or adopted (false: the project has none).
func (p *Persister) Manifest() (repoarchive.RepoManifest, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.man == nil {
		return repoarchive.RepoManifest{}, false
	}
	return *p.man, true
}

// readManifest GETs and parses the project's manifest; found is false
// when it has none (a legacy object or nothing durable).
func (p *Persister) readManifest(ctx context.Context) (m *repoarchive.RepoManifest, etag string, found bool, err error) {
	rc, info, err := p.opts.Store.Get(ctx, p.manKey)
	if errors.Is(err, objstore.ErrNotExist) {
		return nil, "", false, nil
	}
	if err != nil {
		return nil, "", false, fmt.Errorf("durable: get %s: %w", p.manKey, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 2<<20))
	if err != nil {
		return nil, "", false, fmt.Errorf("durable: get %s: %w", p.manKey, err)
	}
	parsed, err := repoarchive.ParseRepoManifest(b, p.opts.ProjectID)
	if err != nil {
		return nil, "", true, fmt.Errorf("durable: %s: %w", p.manKey, err)
	}
	return &parsed, info.ETag, true, nil
}
