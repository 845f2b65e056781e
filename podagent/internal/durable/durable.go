// Package durable persists and restores a project's .git (spec 2.7,
// 10.1): the base <projectId>/repo.git.tar.gz (the spec's artifact, any
// restore can read it), the increments written since (each one pack of the
// objects a persist added, <projectId>/repo.git.inc/…), and the manifest
// <projectId>/repo.git.manifest.json naming them with the refs — the
// commit point of every persist (docs/sync-modes.md §13). A turn uploads
// its change, not the repository; the base is rewritten in the
// background (compact.go).
//
// Fencing (spec 10.1.1, the pod is the sole writer): every base and
// manifest Put goes through the pod's ownership lease (package ownership,
// docs/sync-modes.md §11): it is conditional — If-None-Match "*" for the
// first write of a project, If-Match the ETag this pod last wrote (or
// adopted at start) after — and the project's ownership record is checked
// before and after it. An increment is created once (If-None-Match "*")
// under a key carrying the writer's epoch; no manifest names it until the
// fenced manifest write succeeds. A pod that lost the record is fenced
// for the rest of its life and refuses every further write.
//
// The base holds the contents of .git (names relative to it: HEAD,
// objects/..., refs/...), so extracting it anywhere gives a git dir. Lock
// files, the pod's own state (svc-agent/) and, unless asked, the
// large-file cache (lfs/) are left out.
package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/journal"
	"github.com/svc-dev/svc/podagent/internal/ownership"
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
	// Full makes every persist write the whole base and a manifest without
	// increments (the forced compaction before a downgrade, and the
	// behaviour before increments existed; docs/sync-modes.md §13.6).
	Full bool
	// Compaction tunes the background rewrite of the base (zero values:
	// the defaults).
	Compaction CompactionOptions
}

// Persister owns the durable object of one project. Persist calls must be
// serialised by the caller (gitsync holds its persist lock).
type Persister struct {
	opts   Options
	key    string
	manKey string
	gitDir string
	log    *zap.Logger

	mu   sync.Mutex
	etag string // last ETag written or adopted; "" = no object yet
	// adoptPending: Adopt could not reach storage at start; Upload adopts
	// first.
	adoptPending atomic.Bool
	lease        *ownership.Lease

	// The manifest (docs/sync-modes.md §13.1): the last version this pod
	// wrote, restored or adopted; nil while the project has none (a legacy
	// object, or nothing durable yet).
	man     *repoarchive.RepoManifest
	manETag string
	// lfsInBase: the last full snapshot carried .git/lfs (a large-file push
	// had failed), so a compaction must carry it too.
	lfsInBase bool
	// manMu orders manifest writes of persists and of the compaction.
	manMu sync.Mutex
	bg    background
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
		manKey: objstore.RepoManifestKey(opts.ProjectID),
		gitDir: filepath.Join(opts.Workspace, ".git"),
		log:    opts.Log.Named("durable"),
	}
}

// Lease returns the ownership lease that fences the Persister's writes.
func (p *Persister) Lease() *ownership.Lease { return p.lease }

// Key returns the object key.
func (p *Persister) Key() string { return p.key }

// ETag returns the ETag of the commit point this pod last wrote or
// adopted: the manifest's, or the base's for a legacy project.
func (p *Persister) ETag() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.man != nil {
		return p.manETag
	}
	return p.etag
}

// BaseETag returns the ETag of repo.git.tar.gz this pod last wrote or saw.
func (p *Persister) BaseETag() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.etag
}

// Fenced reports whether another pod owns the project.
func (p *Persister) Fenced() bool { return p.lease.Fenced() }

func (p *Persister) fence(reason string) error {
	return p.lease.Fence(fmt.Sprintf("%s: %s (last ETag %q)", p.key, reason, p.ETag()))
}

// Snapshot is what one persist uploads, staged under the caller's
// repository lock: an increment (a pack of the objects new since the
// durable refs), only new refs, or — the first persist of a project, a
// legacy object, a failed large-file push, the first persist after a
// base that carries the large-file cache, or Options.Full — the whole
// base.
type Snapshot struct {
	Path  string
	Size  int64
	Stats archive.Stats

	kind     snapKind
	refs     map[string]string
	head     string
	format   string
	depsHash string
	headTurn *int64
	lfs      bool
	loose    int // loose objects in a whole base
	pack     *repoarchive.Pack
	sha256   string
}

type snapKind int

const (
	snapFull      snapKind = iota // the whole base, then the manifest
	snapIncrement                 // one increment, then the manifest
	snapRefs                      // refs moved to objects already durable: the manifest only
	snapNone                      // nothing changed since the manifest
)

// Remove deletes the staged files.
func (s *Snapshot) Remove() {
	if s == nil {
		return
	}
	if s.Path != "" {
		_ = os.Remove(s.Path)
	}
	if s.pack != nil {
		_ = os.RemoveAll(s.pack.PackDir)
	}
}

// Incremental reports whether the snapshot is smaller than the base.
func (s *Snapshot) Incremental() bool { return s.kind != snapFull }

// Snapshot stages what the next Upload writes. The caller holds the
// repository lock so the snapshot never sees a half-written commit.
// includeLFS keeps .git/lfs/objects (the large-file cache) with .git:
// spec 10.3, the cache is left out only if the last large-file push
// succeeded, so bytes not yet in object storage travel with .git; such a
// snapshot is a whole base.
func (p *Persister) Snapshot(ctx context.Context, includeLFS bool) (*Snapshot, error) {
	tmpDir := filepath.Join(p.gitDir, StateDirName, "tmp")
	if err := os.MkdirAll(tmpDir, 0o755); err != nil {
		return nil, err
	}
	snap := &Snapshot{lfs: includeLFS}
	var err error
	if snap.refs, snap.head, err = p.localRefs(ctx); err != nil {
		return nil, err
	}
	snap.format, _ = repoarchive.ObjectFormat(p.gitDir)
	snap.headTurn = p.headTurn(ctx)
	var meta *repoarchive.Manifest
	if p.opts.Manifest != nil {
		if m, err := p.opts.Manifest(ctx); err != nil {
			p.log.Warn("building the manifest of the durable object; writing it without one", zap.Error(err))
		} else {
			meta, snap.depsHash = &m, m.DepsHash
		}
	}
	p.mu.Lock()
	man := p.man
	p.mu.Unlock()
	// A base that still carries the large-file cache is rewritten without
	// it once a push has succeeded: the cache is then in object storage.
	if man != nil && !includeLFS && !p.opts.Full && !man.Base.LFS {
		ok, err := p.snapshotIncrement(ctx, snap, man, tmpDir)
		if ok {
			return snap, nil
		}
		p.log.Warn("staging an increment failed; writing the whole base", zap.Error(err))
	}
	return p.snapshotFull(ctx, snap, tmpDir, meta)
}

func (p *Persister) snapshotFull(ctx context.Context, snap *Snapshot, tmpDir string, meta *repoarchive.Manifest) (*Snapshot, error) {
	f, err := os.CreateTemp(tmpDir, "repo-*.tar.gz")
	if err != nil {
		return nil, err
	}
	snap.kind, snap.Path = snapFull, f.Name()
	snap.loose = looseObjects(p.gitDir)
	ropts := repoarchive.Options{Level: p.opts.GzipLevel, IncludeLFS: snap.lfs, Manifest: meta}
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

// Upload writes snap: the base with the fencing condition, or the
// increment (created once, If-None-Match "*"), then the manifest through
// the lease — the commit point. On success the new ETags are remembered
// (in memory and on disk).
func (p *Persister) Upload(ctx context.Context, snap *Snapshot) (objstore.ObjectInfo, error) {
	if p.adoptPending.Load() {
		if err := p.Adopt(ctx); err != nil {
			return objstore.ObjectInfo{}, err
		}
	}
	if p.Fenced() {
		return objstore.ObjectInfo{}, ErrFenced
	}
	p.manMu.Lock()
	defer p.manMu.Unlock()
	p.mu.Lock()
	cur, curETag := p.man, p.manETag
	p.mu.Unlock()
	if snap.kind == snapNone && cur != nil {
		// Nothing to write; still only the owner may call it durable.
		return objstore.ObjectInfo{Key: p.manKey, ETag: curETag}, p.lease.Check(ctx)
	}
	next := p.nextManifest(cur)
	switch snap.kind {
	case snapFull:
		info, err := p.putBase(ctx, snap.Path, snap.Size)
		if err != nil {
			return info, err
		}
		next.Base = repoarchive.BaseRef{ETag: info.ETag, Epoch: next.Epoch, Seq: next.Seq, Bytes: snap.Size, Refs: snap.refs, LFS: snap.lfs, Loose: snap.loose}
		next.Retired = retire(next.Retired, next.Increments, time.Now())
		next.Increments = nil
		p.mu.Lock()
		p.lfsInBase = snap.lfs
		p.mu.Unlock()
	case snapIncrement:
		inc, err := p.putIncrement(ctx, snap, next)
		if err != nil {
			return objstore.ObjectInfo{}, err
		}
		next.Increments = append(next.Increments, inc)
	}
	next.Refs, next.Head, next.DepsHash, next.HeadTurn = snap.refs, snap.head, snap.depsHash, snap.headTurn
	if snap.format != "" {
		next.ObjectFormat = snap.format
	}
	info, err := p.putManifest(ctx, curETag, next)
	if err != nil {
		return info, err
	}
	p.maybeCompact()
	return info, nil
}

// putBase writes repo.git.tar.gz through the lease, If-Match the base
// this pod last wrote or saw.
func (p *Persister) putBase(ctx context.Context, path string, size int64) (objstore.ObjectInfo, error) {
	info, err := p.lease.Put(ctx, p.opts.Store, p.key, p.BaseETag(), hookedBody(ownership.FileBody(path)), objstore.PutOptions{ContentType: "application/gzip"})
	if errors.Is(err, ErrFenced) {
		return info, err
	}
	if err != nil {
		return info, fmt.Errorf("durable: put %s: %w", p.key, err)
	}
	p.mu.Lock()
	p.etag = info.ETag
	p.mu.Unlock()
	return info, nil
}

// hookedBody pauses at testhook.MidUpload half way through the body.
func hookedBody(body ownership.Body) ownership.Body {
	if !testhook.Enabled() {
		return body
	}
	return func() (io.ReadCloser, int64, error) {
		f, size, err := body()
		if err != nil {
			return nil, 0, err
		}
		return struct {
			io.Reader
			io.Closer
		}{&midHookReader{r: f, half: size / 2}, f}, size, nil
	}
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

// state is durable.json: what this pod last wrote or adopted.
type state struct {
	ETag         string    `json:"etag"` // the base
	ManifestETag string    `json:"manifestEtag,omitempty"`
	Written      time.Time `json:"written"`
}

func (p *Persister) statePath() string {
	return filepath.Join(p.gitDir, StateDirName, "durable.json")
}

func (p *Persister) saveState(st state) error {
	st.Written = time.Now().UTC()
	b, _ := json.Marshal(st)
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

// looseObjects counts the loose objects of the repository at gitDir (the
// files of objects/xx/); an unreadable directory counts as none.
func looseObjects(gitDir string) int {
	dirs, err := os.ReadDir(filepath.Join(gitDir, "objects"))
	if err != nil {
		return 0
	}
	n := 0
	for _, d := range dirs {
		if name := d.Name(); d.IsDir() && len(name) == 2 && isHex(name) {
			files, _ := os.ReadDir(filepath.Join(gitDir, "objects", name))
			n += len(files)
		}
	}
	return n
}

func isHex(s string) bool {
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}
