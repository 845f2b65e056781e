// Package durable persists and restores a project's .git as the durable
// object <projectId>/repo.git.tar.gz (spec 2.7, 10.1).
//
// Fencing (spec 10.1.1, the pod is the sole writer): every Put goes through
// the pod's ownership lease (package ownership, docs/sync-modes.md §11): it
// is conditional — If-None-Match "*" for the first write of a project,
// If-Match the ETag this pod last wrote (or adopted at start) after — and
// the project's ownership record is checked before and after it. A pod
// that lost the record is fenced for the rest of its life and refuses
// every further write. A second pod that wrongly holds the same project can
// therefore never overwrite a newer history.
//
// The archive holds the contents of .git (names relative to it: HEAD,
// objects/..., refs/...), so extracting it anywhere gives a git dir the API
// can use as is. Lock files, the pod's own state (svc-agent/) and, unless
// asked, the large-file cache (lfs/) are left out.
package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/journal"
	"github.com/svc-dev/svc/podagent/internal/ownership"
	"github.com/svc-dev/svc/podagent/internal/s3sync"
	"github.com/svc-dev/svc/podagent/internal/testhook"
	"github.com/svc-dev/svc/shared/archive"
	"github.com/svc-dev/svc/shared/atomicfile"
	"github.com/svc-dev/svc/shared/gitrun"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/repoarchive"
)

// ErrAdoptPending is Adopt's answer when object storage cannot be asked:
// the pod may serve from its local .git, and the first Upload adopts first.
var ErrAdoptPending = errors.New("durable: object storage unavailable; adopting at the first upload")

// StateDirName is the pod's own directory inside .git; never archived.
const StateDirName = "svc-agent"

// restoreStaging is where Restore extracts before moving into place.
const restoreStaging = ".git.restoring"

// ErrFenced is returned by every write once another pod owns the project
// (ownership.ErrFenced).
var ErrFenced = ownership.ErrFenced

// Options configure a Persister.
type Options struct {
	Store     objstore.Store
	ProjectID string
	// Workspace is the work tree; its .git is what is persisted.
	Workspace string
	Runner    *gitrun.Runner
	Log       *zap.Logger
	// GzipLevel of the archive; 0 means 1 (fastest: git objects are
	// already zlib-compressed, so higher levels buy little).
	GzipLevel int
	// Manifest, when set, is called by Snapshot (under the caller's
	// repository lock) and its result written as the archive's first entry
	// (repoarchive.ManifestName), so it is fenced with the object itself.
	// An error leaves the manifest out; cold start then falls back to
	// reading the deps key from HEAD.
	Manifest func(ctx context.Context) (repoarchive.Manifest, error)
	// Lease fences every write (nil: a lease of its own, claimed at the
	// first write).
	Lease *ownership.Lease
}

// Persister owns the durable object of one project. Persist calls must be
// serialised by the caller (gitsync holds its persist lock).
type Persister struct {
	opts   Options
	key    string
	gitDir string
	log    *zap.Logger

	mu   sync.Mutex
	etag string // last ETag written or adopted; "" = no object yet
	// adoptPending: Adopt could not reach storage at start; Upload adopts
	// first.
	adoptPending atomic.Bool
	lease        *ownership.Lease
}

// New returns a Persister; call Restore or Adopt before the first Persist.
func New(opts Options) *Persister {
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	if opts.GzipLevel == 0 {
		opts.GzipLevel = 1
	}
	if opts.Lease == nil {
		opts.Lease = ownership.New(ownership.Options{Store: opts.Store, ProjectID: opts.ProjectID, Log: opts.Log})
	}
	return &Persister{
		lease:  opts.Lease,
		opts:   opts,
		key:    objstore.RepoKey(opts.ProjectID),
		gitDir: filepath.Join(opts.Workspace, ".git"),
		log:    opts.Log.Named("durable"),
	}
}

// Lease returns the ownership lease that fences the Persister's writes.
func (p *Persister) Lease() *ownership.Lease { return p.lease }

// Key returns the object key.
func (p *Persister) Key() string { return p.key }

// ETag returns the ETag this pod last wrote or adopted.
func (p *Persister) ETag() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.etag
}

// Fenced reports whether another pod owns the project.
func (p *Persister) Fenced() bool { return p.lease.Fenced() }

func (p *Persister) fence(reason string) error {
	return p.lease.Fence(fmt.Sprintf("%s: %s (last ETag %q)", p.key, reason, p.ETag()))
}

// Snapshot is a staged archive of .git, ready to upload.
type Snapshot struct {
	Path  string
	Size  int64
	Stats archive.Stats
}

// Remove deletes the staged file.
func (s *Snapshot) Remove() {
	if s != nil {
		_ = os.Remove(s.Path)
	}
}

// Snapshot writes the archive of .git to a temp file. The caller holds the
// repository lock so the snapshot never sees a half-written commit.
// includeLFS keeps .git/lfs/objects (the large-file cache) in the archive:
// spec 10.3, the cache is left out only if the last large-file push
// succeeded, so bytes not yet in object storage travel with .git.
func (p *Persister) Snapshot(ctx context.Context, includeLFS bool) (*Snapshot, error) {
	tmpDir := filepath.Join(p.gitDir, StateDirName, "tmp")
	if err := os.MkdirAll(tmpDir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(tmpDir, "repo-*.tar.gz")
	if err != nil {
		return nil, err
	}
	snap := &Snapshot{Path: f.Name()}
	ropts := repoarchive.Options{Level: p.opts.GzipLevel, IncludeLFS: includeLFS}
	if p.opts.Manifest != nil {
		if m, err := p.opts.Manifest(ctx); err != nil {
			p.log.Warn("building the manifest of the durable object; writing it without one", zap.Error(err))
		} else {
			ropts.Manifest = &m
		}
	}
	st, err := repoarchive.Create(f, p.gitDir, ropts)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		snap.Remove()
		return nil, fmt.Errorf("durable: archive .git: %w", err)
	}
	fi, err := os.Stat(snap.Path)
	if err != nil {
		snap.Remove()
		return nil, err
	}
	snap.Size, snap.Stats = fi.Size(), st
	return snap, nil
}

// Upload writes snap with the fencing condition. On success the new ETag is
// remembered (in memory and on disk).
func (p *Persister) Upload(ctx context.Context, snap *Snapshot) (objstore.ObjectInfo, error) {
	if p.adoptPending.Load() {
		if err := p.Adopt(ctx); err != nil {
			return objstore.ObjectInfo{}, err
		}
	}
	if p.Fenced() {
		return objstore.ObjectInfo{}, ErrFenced
	}
	body := ownership.FileBody(snap.Path)
	if testhook.Enabled() {
		body = func() (io.ReadCloser, int64, error) {
			f, size, err := ownership.FileBody(snap.Path)()
			if err != nil {
				return nil, 0, err
			}
			return struct {
				io.Reader
				io.Closer
			}{&midHookReader{r: f, half: size / 2}, f}, size, nil
		}
	}
	info, err := p.lease.Put(ctx, p.opts.Store, p.key, p.ETag(), body, objstore.PutOptions{ContentType: "application/gzip"})
	if errors.Is(err, ErrFenced) {
		return info, err
	}
	if err != nil {
		return info, fmt.Errorf("durable: put %s: %w", p.key, err)
	}
	p.mu.Lock()
	p.etag = info.ETag
	p.mu.Unlock()
	if err := p.saveState(info.ETag); err != nil {
		p.log.Warn("saving durable state", zap.Error(err))
	}
	return info, nil
}

// midHookReader calls testhook.MidUpload once half the bytes were read.
type midHookReader struct {
	r    io.Reader
	n    int64
	half int64
	done bool
}

func (m *midHookReader) Read(b []byte) (int, error) {
	if !m.done && m.n >= m.half && m.half > 0 {
		m.done = true
		testhook.Reach(testhook.MidUpload)
	}
	if !m.done && m.half > 0 && m.n+int64(len(b)) > m.half {
		b = b[:m.half-m.n]
	}
	n, err := m.r.Read(b)
	m.n += int64(n)
	return n, err
}

type state struct {
	ETag    string    `json:"etag"`
	Written time.Time `json:"written"`
}

func (p *Persister) statePath() string {
	return filepath.Join(p.gitDir, StateDirName, "durable.json")
}

func (p *Persister) saveState(etag string) error {
	b, _ := json.Marshal(state{ETag: etag, Written: time.Now().UTC()})
	return atomicfile.Write(p.statePath(), b, 0o600)
}

func (p *Persister) loadState() (state, error) {
	var st state
	b, err := os.ReadFile(p.statePath())
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(b, &st)
}

// HasLocalRepo reports whether the workspace already has a .git.
func (p *Persister) HasLocalRepo() bool {
	fi, err := os.Stat(filepath.Join(p.gitDir, "HEAD"))
	return err == nil && fi.Mode().IsRegular()
}

// Restore downloads the durable object into <workspace>/.git. It does
// nothing (false) when .git is already local (spec 10.1.7) or when no
// object exists. It extracts into a staging directory first, so a crash
// never leaves a partial .git.
func (p *Persister) Restore(ctx context.Context, limits archive.ExtractOptions) (restored bool, err error) {
	return p.RestoreWith(ctx, limits, nil)
}

// RestoreWith is Restore that hands the object's manifest to onManifest as
// soon as the download reaches it (the first entry), while the rest of .git
// is still being extracted; nil onManifest ignores it. onManifest must not
// block. An object without a manifest (written before it existed) never
// calls it.
func (p *Persister) RestoreWith(ctx context.Context, limits archive.ExtractOptions, onManifest func(repoarchive.Manifest)) (restored bool, err error) {
	staging := filepath.Join(p.opts.Workspace, restoreStaging)
	_ = os.RemoveAll(staging)
	if p.HasLocalRepo() {
		return false, nil
	}
	rc, info, err := p.opts.Store.Get(ctx, p.key)
	if errors.Is(err, objstore.ErrNotExist) {
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
		if onManifest != nil {
			onManifest(m)
		}
	}}
	if _, err := s3sync.ExtractTarGzTap(rc, staging, limits, tap); err != nil {
		_ = os.RemoveAll(staging)
		return false, fmt.Errorf("durable: extract %s: %w", p.key, err)
	}
	if err := Sanitize(staging); err != nil {
		_ = os.RemoveAll(staging)
		return false, err
	}
	// The extraction wrote without fsync; make .git durable before
	// durable.json vouches for it, or a power loss could leave an adopted
	// .git with empty packs (the ETag would match and nothing would check).
	if err := atomicfile.SyncTree(staging); err != nil {
		_ = os.RemoveAll(staging)
		return false, fmt.Errorf("durable: sync restored .git: %w", err)
	}
	if err := carryJournal(p.gitDir, staging); err != nil {
		_ = os.RemoveAll(staging)
		return false, err
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
	p.mu.Unlock()
	if err := p.saveState(info.ETag); err != nil {
		return true, err
	}
	p.log.Info("restored .git from the durable object", zap.String("key", p.key), zap.String("etag", info.ETag), zap.Int64("bytes", info.Size))
	return true, nil
}

// Adopt establishes the fencing token when .git is already local (a
// restart on the same disk). If the durable object still has the ETag this
// pod last wrote, or holds nothing the local repository lacks (a crash
// between PUT and recording the ETag), its ETag is adopted. Otherwise
// another writer got ahead: the Persister is fenced.
func (p *Persister) Adopt(ctx context.Context) error {
	info, err := p.opts.Store.Head(ctx, p.key)
	if errors.Is(err, objstore.ErrNotExist) {
		p.mu.Lock()
		p.etag = ""
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
		if p.Fenced() || p.ETag() == info.ETag {
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
	return p.saveState(info.ETag)
}

// localContains downloads the durable object and checks that each of its
// refs is present locally under the same name with the durable tip being an
// ancestor of (or equal to) the local tip.
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

// Cleanup removes leftovers of a crash (staged snapshots).
func (p *Persister) Cleanup() {
	_ = os.RemoveAll(filepath.Join(p.gitDir, StateDirName, "tmp"))
	_ = os.RemoveAll(filepath.Join(p.opts.Workspace, restoreStaging))
}

// carryJournal moves the pod's journal (which the pod opens before cold
// start, and may hold open) from a headless .git into the restored one: a
// rename keeps the open file, and the promises journaled in it, in place.
func carryJournal(gitDir, staging string) error {
	from := filepath.Join(gitDir, StateDirName, journal.FileName)
	if _, err := os.Lstat(from); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(staging, StateDirName), 0o700); err != nil {
		return err
	}
	if err := os.Rename(from, filepath.Join(staging, StateDirName, journal.FileName)); err != nil {
		return fmt.Errorf("durable: carry the journal into the restored .git: %w", err)
	}
	return atomicfile.SyncDir(filepath.Join(staging, StateDirName))
}
