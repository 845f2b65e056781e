package durable

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/s3sync"
	"github.com/svc-dev/svc/shared/archive"
	"github.com/svc-dev/svc/shared/atomicfile"
	"github.com/svc-dev/svc/shared/gitrun"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/repoarchive"
)

// Restore downloads the durable .git into <workspace>/.git. It does
// nothing (false) when .git is already local (spec 10.1.7) or when no
// object exists. It extracts into a staging directory first, so a crash
// never leaves a partial .git.
func (p *Persister) Restore(ctx context.Context, limits archive.ExtractOptions) (restored bool, err error) {
	return p.RestoreWith(ctx, limits, nil)
}

// RestoreWith is Restore that hands the deps hash to onManifest as soon as
// it is known (from the manifest, or from the base's first entry while the
// rest of .git is still being extracted); nil onManifest ignores it.
// onManifest must not block. An object without either never calls it.
//
// With a manifest (docs/sync-modes.md §13.4) the restore is the base, then
// every increment it lists (each a pack and its index, nothing else), then
// the refs and HEAD written from the manifest; the sanitising of .git
// applies to the whole. Without one (a legacy object) it is the base
// alone.
func (p *Persister) RestoreWith(ctx context.Context, limits archive.ExtractOptions, onManifest func(repoarchive.Manifest)) (restored bool, err error) {
	staging := filepath.Join(p.opts.Workspace, restoreStaging)
	_ = os.RemoveAll(staging)
	if p.HasLocalRepo() {
		return false, nil
	}
	man, manETag, found, err := p.readManifest(ctx)
	if err != nil {
		return false, err
	}
	if found && onManifest != nil {
		onManifest(repoarchive.Manifest{DepsHash: man.DepsHash})
	}
	rc, info, err := p.opts.Store.Get(ctx, p.key)
	if errors.Is(err, objstore.ErrNotExist) {
		if found {
			return false, fmt.Errorf("durable: %s names a base, but %s is missing", p.manKey, p.key)
		}
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("durable: get %s: %w", p.key, err)
	}
	defer rc.Close()
	limits.NoLinks = true // a .git never holds a link
	tap := &s3sync.Tap{Name: repoarchive.ManifestName, Fn: func(b []byte) {
		m, err := repoarchive.ParseManifest(b)
		if err != nil {
			p.log.Warn("ignoring the manifest of the durable object", zap.Error(err))
			return
		}
		if onManifest != nil && !found {
			onManifest(m)
		}
	}}
	fail := func(err error) (bool, error) {
		_ = os.RemoveAll(staging)
		return false, err
	}
	if _, err := s3sync.ExtractTarGzTap(rc, staging, limits, tap); err != nil {
		return fail(fmt.Errorf("durable: extract %s: %w", p.key, err))
	}
	var incBytes int64
	if found {
		if incBytes, err = repoarchive.FetchIncrements(ctx, p.opts.Store, man, staging, nil); err != nil {
			return fail(fmt.Errorf("durable: %w", err))
		}
		if err := repoarchive.ApplyRefs(staging, man); err != nil {
			return fail(fmt.Errorf("durable: refs from %s: %w", p.manKey, err))
		}
	}
	if err := Sanitize(staging); err != nil {
		return fail(err)
	}
	// The extraction wrote without fsync; make .git durable before
	// durable.json vouches for it, or a power loss could leave an adopted
	// .git with empty packs (the ETag would match and nothing would check).
	if err := atomicfile.SyncTree(staging); err != nil {
		return fail(fmt.Errorf("durable: sync restored .git: %w", err))
	}
	if err := carryJournal(p.gitDir, staging); err != nil {
		return fail(err)
	}
	_ = os.RemoveAll(p.gitDir) // a .git without HEAD is a leftover, not a repo
	if err := os.Rename(staging, p.gitDir); err != nil {
		return false, err
	}
	if err := atomicfile.SyncDir(p.opts.Workspace); err != nil {
		return false, fmt.Errorf("durable: sync workspace: %w", err)
	}
	p.mu.Lock()
	p.etag = info.ETag
	if found {
		p.man, p.manETag = man, manETag
	}
	p.mu.Unlock()
	if err := p.saveState(state{ETag: info.ETag, ManifestETag: manETag}); err != nil {
		return true, err
	}
	fields := []zap.Field{zap.String("key", p.key), zap.String("etag", info.ETag), zap.Int64("bytes", info.Size)}
	if found {
		fields = append(fields, zap.Int64("seq", man.Seq), zap.Int("increments", len(man.Increments)), zap.Int64("incrementBytes", incBytes))
	}
	p.log.Info("restored .git from the durable object", fields...)
	return true, nil
}

// Adopt establishes the fencing token when .git is already local (a
// restart on the same disk). If the durable manifest (or, for a legacy
// project, the base) still has the ETag this pod last wrote, or names
// nothing the local repository lacks (a crash between PUT and recording
// the ETag), it is adopted. Otherwise another writer got ahead: the
// Persister is fenced.
func (p *Persister) Adopt(ctx context.Context) error {
	_, err := p.opts.Store.Head(ctx, p.manKey)
	if err == nil {
		return p.adoptManifest(ctx)
	}
	if !errors.Is(err, objstore.ErrNotExist) {
		p.adoptPending.Store(true)
		return fmt.Errorf("%w: head %s: %w", ErrAdoptPending, p.manKey, err)
	}
	info, err := p.opts.Store.Head(ctx, p.key)
	if errors.Is(err, objstore.ErrNotExist) {
		p.mu.Lock()
		p.etag, p.man, p.manETag = "", nil, ""
		p.mu.Unlock()
		p.adoptPending.Store(false)
		return nil
	}
	if err != nil {
		// Storage is down: the pod serves from its local .git and the first
		// upload adopts (or fences) before it writes anything.
		p.adoptPending.Store(true)
		return fmt.Errorf("%w: head %s: %w", ErrAdoptPending, p.key, err)
	}
	defer func() {
		if p.Fenced() || p.BaseETag() == info.ETag {
			p.adoptPending.Store(false)
		}
	}()
	if st, err := p.loadState(); err == nil && st.ETag == info.ETag {
		p.mu.Lock()
		p.etag = info.ETag
		p.mu.Unlock()
		return nil
	}
	// The object changed since our last recorded write: accept it only if
	// everything it holds is already in the local repository.
	ok, why, err := p.localContains(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return p.fence(why)
	}
	p.mu.Lock()
	p.etag = info.ETag
	p.mu.Unlock()
	p.log.Info("adopted the durable object: local history contains it", zap.String("etag", info.ETag))
	return p.saveState(state{ETag: info.ETag})
}

// adoptManifest is Adopt for a project with a manifest: containment is
// checked from the manifest's refs alone, with no download of the base.
func (p *Persister) adoptManifest(ctx context.Context) error {
	man, etag, found, err := p.readManifest(ctx)
	if errors.Is(err, repoarchive.ErrManifestVersion) {
		return err
	}
	if err != nil || !found {
		p.adoptPending.Store(true)
		return fmt.Errorf("%w: %w", ErrAdoptPending, err)
	}
	st, _ := p.loadState()
	if st.ManifestETag != etag {
		ok, why, err := p.containsRefs(ctx, man.Refs)
		if err != nil {
			p.adoptPending.Store(true)
			return fmt.Errorf("%w: %w", ErrAdoptPending, err)
		}
		if !ok {
			p.adoptPending.Store(false)
			return p.fence(why)
		}
		p.log.Info("adopted the durable manifest: local history contains it", zap.String("etag", etag), zap.Int64("seq", man.Seq))
	}
	base := st.ETag
	if base == "" || st.ManifestETag != etag {
		base = man.Base.ETag
	}
	p.mu.Lock()
	p.etag, p.man, p.manETag = base, man, etag
	p.mu.Unlock()
	p.adoptPending.Store(false)
	return p.saveState(state{ETag: base, ManifestETag: etag})
}

// localContains downloads the (legacy) durable object and checks that
// each of its refs is contained locally.
func (p *Persister) localContains(ctx context.Context) (bool, string, error) {
	tmp, err := os.MkdirTemp(filepath.Join(p.gitDir, StateDirName), "adopt-")
	if err != nil {
		if err := os.MkdirAll(filepath.Join(p.gitDir, StateDirName), 0o755); err != nil {
			return false, "", err
		}
		if tmp, err = os.MkdirTemp(filepath.Join(p.gitDir, StateDirName), "adopt-"); err != nil {
			return false, "", err
		}
	}
	defer os.RemoveAll(tmp)
	rc, _, err := p.opts.Store.Get(ctx, p.key)
	if err != nil {
		return false, "", fmt.Errorf("durable: get %s: %w", p.key, err)
	}
	_, err = archive.ExtractTarGz(rc, tmp, archive.ExtractOptions{NoLinks: true})
	rc.Close()
	if err == nil {
		err = Sanitize(tmp)
	}
	if err != nil {
		return false, "", fmt.Errorf("durable: extract %s: %w", p.key, err)
	}
	remote, err := p.opts.Runner.Refs(ctx, tmp)
	if err != nil {
		return false, "", err
	}
	return p.containsRefs(ctx, remote)
}

// containsRefs reports whether each durable ref is present locally under
// the same name with the durable tip an ancestor of (or equal to) the
// local tip.
func (p *Persister) containsRefs(ctx context.Context, remote map[string]string) (bool, string, error) {
	local, err := p.opts.Runner.Refs(ctx, p.gitDir)
	if err != nil {
		return false, "", err
	}
	for name, sha := range remote {
		lsha, ok := local[name]
		if !ok {
			return false, "durable ref " + name + " is missing locally", nil
		}
		if lsha == sha {
			continue
		}
		err := p.opts.Runner.Command("merge-base", "--is-ancestor").AddDynamic(sha, lsha).Env("GIT_DIR=" + p.gitDir).Run(ctx)
		if err != nil {
			if gitrun.ExitCode(err) == 1 || gitrun.ExitCode(err) == 128 {
				return false, fmt.Sprintf("durable %s at %s is not contained in the local %s", name, sha, lsha), nil
			}
			return false, "", err
		}
	}
	return true, "", nil
}
