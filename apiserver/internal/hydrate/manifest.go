package hydrate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/svc-dev/svc/shared/archive"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/repoarchive"
	"github.com/svc-dev/svc/shared/wire"
)

// A project with a manifest (docs/sync-modes.md §13.4) is hydrated from
// the base plus the increments the manifest lists, with refs and HEAD
// written from the manifest. The copy's identity is the manifest's ETag.
// When the base is the one the current copy was made from, the new copy
// links the current copy's objects and fetches only the increments it
// lacks: a read after a turn downloads that turn's increment, not the
// repository.

// probe returns what identifies the durable state of projectID: the
// manifest's info when it has one, else the base's.
func (m *Manager) probe(ctx context.Context, projectID string) (objstore.ObjectInfo, error) {
	m.probes.Add(1)
	info, err := m.opts.Store.Head(ctx, objstore.RepoManifestKey(projectID))
	if err == nil {
		return info, nil
	}
	if !errors.Is(err, objstore.ErrNotExist) {
		return info, fmt.Errorf("%w: head %s: %w", ErrUnavailable, objstore.RepoManifestKey(projectID), err)
	}
	key := objstore.RepoKey(projectID)
	info, err = m.opts.Store.Head(ctx, key)
	if errors.Is(err, objstore.ErrNotExist) {
		return info, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if err != nil {
		return info, fmt.Errorf("%w: head %s: %w", ErrUnavailable, key, err)
	}
	return info, nil
}

// hasManifest reports whether info (from probe) is a manifest's.
func hasManifest(info objstore.ObjectInfo, projectID string) bool {
	return info.Key == objstore.RepoManifestKey(projectID)
}

// downloadManifest hydrates a new version from the manifest: from cur's
// objects plus the new increments when the base is unchanged, else from
// the base plus every increment. It returns the ETag it saw (for
// remembering a corrupt one).
func (m *Manager) downloadManifest(ctx context.Context, projectID string) (*version, string, error) {
	key := objstore.RepoManifestKey(projectID)
	man, minfo, err := repoarchive.GetManifest(ctx, m.opts.Store, projectID)
	if errors.Is(err, objstore.ErrNotExist) {
		return m.download(ctx, projectID) // removed since the probe: a legacy object again
	}
	if errors.Is(err, repoarchive.ErrManifestVersion) {
		return nil, minfo.ETag, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if err != nil {
		if minfo.ETag != "" {
			return nil, minfo.ETag, fmt.Errorf("%w: %s: %w", ErrCorrupt, key, err)
		}
		return nil, "", fmt.Errorf("%w: get %s: %w", ErrUnavailable, key, err)
	}
	staging := filepath.Join(m.opts.Dir, ".staging", projectID+"-"+randomHex())
	cleanup := func() { _ = os.RemoveAll(staging) }
	base, applied, fetched, err := m.fromCurrent(ctx, projectID, staging)
	if err != nil {
		cleanup()
		return nil, "", err
	}
	if applied == nil {
		// Full: the base, then every increment.
		rc, binfo, err := m.opts.Store.Get(ctx, objstore.RepoKey(projectID))
		if errors.Is(err, objstore.ErrNotExist) {
			return nil, minfo.ETag, fmt.Errorf("%w: %s names a base that is missing", ErrCorrupt, key)
		}
		if err != nil {
			return nil, "", fmt.Errorf("%w: get %s: %w", ErrUnavailable, objstore.RepoKey(projectID), err)
		}
		cr := &countingReader{r: rc}
		limits := m.opts.Limits
		limits.NoLinks = true
		_, err = archive.ExtractTarGz(cr, staging, limits)
		rc.Close()
		if err != nil {
			cleanup()
			if wire.DiskFull(err) {
				return nil, "", fmt.Errorf("%w: extracting the base: %w", ErrDiskFull, err)
			}
			if cr.err != nil || ctx.Err() != nil {
				return nil, "", fmt.Errorf("%w: reading the base: %w", ErrUnavailable, err)
			}
			return nil, minfo.ETag, fmt.Errorf("%w: base of %s: %w", ErrCorrupt, key, err)
		}
		base, applied, fetched = binfo, map[string]bool{}, binfo.Size
	}
	n, err := repoarchive.FetchIncrements(ctx, m.opts.Store, man, staging, func(k string) bool { return applied[k] })
	fetched += n
	if err == nil {
		err = repoarchive.ApplyRefs(staging, man)
	}
	if err == nil {
		err = m.prepare(ctx, staging)
	}
	if err != nil {
		cleanup()
		if wire.DiskFull(err) {
			return nil, "", fmt.Errorf("%w: %w", ErrDiskFull, err)
		}
		if ctx.Err() != nil || errors.Is(err, objstore.ErrNotExist) {
			// An increment retired under a slow reader: the next probe
			// reads the newer manifest.
			return nil, "", fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return nil, minfo.ETag, fmt.Errorf("%w: %s (etag %s): %w", ErrCorrupt, key, minfo.ETag, err)
	}
	next := map[string]bool{}
	for _, inc := range man.Increments {
		next[inc.Key] = true
	}
	m.fetched.Add(fetched)
	v, err := m.publishStaging(projectID, staging, minfo)
	if err != nil {
		return nil, "", err
	}
	v.base, v.applied, v.bytes = base, next, base.Size+man.IncrementBytes()
	return v, minfo.ETag, nil
}

// fromCurrent links the current copy's objects into staging when its base
// is still the durable one; applied is nil when it is not (or there is no
// current copy), and the caller hydrates in full.
func (m *Manager) fromCurrent(ctx context.Context, projectID, staging string) (objstore.ObjectInfo, map[string]bool, int64, error) {
	m.mu.Lock()
	p := m.projects[projectID]
	var cur *version
	var base objstore.ObjectInfo
	var applied map[string]bool
	if p != nil && p.cur != nil && p.cur.applied != nil {
		cur, base = p.cur, p.cur.base
		cur.refs++ // kept on disk while linked from
		applied = make(map[string]bool, len(cur.applied))
		for k := range cur.applied {
			applied[k] = true
		}
	}
	m.mu.Unlock()
	if cur == nil {
		return objstore.ObjectInfo{}, nil, 0, nil
	}
	defer m.release(cur)
	binfo, err := m.opts.Store.Head(ctx, objstore.RepoKey(projectID))
	if err != nil || binfo.ETag != base.ETag {
		return objstore.ObjectInfo{}, nil, 0, nil
	}
	// git never rewrites an object or pack file in place; the
	// commit-graph is replaced by rename.
	if err := repoarchive.LinkTree(filepath.Join(cur.dir, "objects"), filepath.Join(staging, "objects"), false); err != nil {
		_ = os.RemoveAll(staging)
		return objstore.ObjectInfo{}, nil, 0, nil
	}
	return base, applied, 0, nil
}

// AdoptIncrement is Adopt for a write the API made from r's copy: info is
// the new manifest (or, for a legacy project, base) and incKey the
// increment it added ("" when none), which the copy already holds.
func (m *Manager) AdoptIncrement(r *Repo, info objstore.ObjectInfo, incKey string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.projects[r.ProjectID]; p != nil && p.cur == r.v {
		r.v.info = info
		if r.v.applied != nil && incKey != "" {
			r.v.applied[incKey] = true
		}
	}
}
