// Package hydrate keeps, per project and per replica, a read-only copy of the
// project's durable .git (<projectId>/repo.git.tar.gz, spec 2.7) under the
// data dir, so the API can serve checkpoint reads and external clones
// without ever writing the durable object (spec 4.3, 10.1.3).
//
// Every Acquire sends a HEAD probe for the object and downloads it only when
// its ETag differs from the copy on disk (the per-replica ETag cache of spec
// 10.1.3). A project with a manifest (<projectId>/repo.git.manifest.json,
// docs/sync-modes.md §13) is probed by the manifest's ETag and hydrated
// from base + increments; when only increments were added, only those are
// fetched (manifest.go). Concurrent Acquires of one project share one probe and one
// download (singleflight). A new copy is extracted with shared/archive (which
// refuses entries that escape the target) into a staging directory, checked,
// sanitised and only then renamed into a fresh version directory and
// published by a pointer swap: a reader holds a reference to the version it
// opened until Release, so it never sees a half-extracted repository, and a
// retired version is deleted once its last reader releases it.
//
// A missing object is ErrNotFound. A corrupt object (ErrCorrupt) or an
// unreachable store (ErrUnavailable) is an error only when no earlier copy
// exists; otherwise the last good copy is returned flagged Stale. A corrupt
// ETag is remembered, so it is not downloaded again until the object changes.
// Copies are evicted least-recently-used first once their total size passes
// Options.DiskBudget.
//
// On each (re)hydrate, commits of the repository that have no
// ProjectCheckpoint row get one with source reconcile (spec 3.2: a record
// call the pod could not make is not lost).
package hydrate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"

	"github.com/svc-dev/svc/shared/archive"
	"github.com/svc-dev/svc/shared/gitrun"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/repoarchive"
	"github.com/svc-dev/svc/shared/settings"
	"github.com/svc-dev/svc/shared/syncmode"
	"github.com/svc-dev/svc/shared/wire"
)

// Error kinds, matched with errors.Is.
var (
	// ErrNotFound: the project has no durable object (yet).
	ErrNotFound = errors.New("hydrate: the project has no durable repository object")
	// ErrCorrupt: the object could not be extracted or is not a git
	// repository (bad gzip or tar, an unsafe entry, missing HEAD, ...).
	ErrCorrupt = errors.New("hydrate: the durable repository object is corrupt")
	// ErrUnavailable: object storage could not be reached or read.
	ErrUnavailable = errors.New("hydrate: object storage is unavailable")
	// ErrInvalidProject: the project id cannot name a directory.
	ErrInvalidProject = errors.New("hydrate: invalid project id")
	// ErrDiskFull: the data directory's disk has no room for the copy
	// (507 insufficient_storage; the object is not marked corrupt).
	ErrDiskFull = errors.New("hydrate: no space left on the data directory")
)

// SourceReconcile is the checkpoint source of rows written by a hydrate
// (store.SourceReconcile; repeated here so tests and fakes need no store).
const SourceReconcile = "reconcile"

// Defaults of Options.
const (
	DefaultRefreshTimeout = 10 * time.Minute
	// DefaultMaxTotalBytes bounds the uncompressed size of one repository.
	DefaultMaxTotalBytes = 8 << 30
	maxReconcileMessage  = 64 << 10
)

// Checkpoints is the part of the store a hydrate reconciles rows with
// (*store.Store implements it).
type Checkpoints interface {
	CheckpointSHAs(ctx context.Context, projectID string) (map[string]bool, error)
	RecordCheckpoint(ctx context.Context, projectID string, rec wire.CheckpointRecord, source string) (string, bool, error)
	// DeleteCheckpoints removes the rows of the given commits (rows that
	// are not turns) and returns how many it removed.
	DeleteCheckpoints(ctx context.Context, projectID string, shas []string) (int64, error)
	// CloudSyncMode is the project's mode now: only a mode whose rows come
	// from the durable history is reconciled (syncmode.Mode.GitCheckpoints).
	CloudSyncMode(ctx context.Context, projectID string) (syncmode.Mode, error)
}

// Options configure a Manager.
type Options struct {
	Store objstore.Store
	// Dir holds the copies (<data dir>/hydrated). Its content is owned by
	// the Manager: New empties it.
	Dir    string
	Runner *gitrun.Runner
	// Checkpoints, when set, receives reconciled rows on each hydrate.
	Checkpoints Checkpoints
	// DiskBudget bounds the total size of the copies in bytes; 0 means no
	// bound. The copy being read is never evicted.
	DiskBudget int64
	// Limits bound one extraction; zero fields take archive defaults,
	// except MaxTotalBytes which defaults to DefaultMaxTotalBytes.
	Limits archive.ExtractOptions
	// RefreshTimeout bounds one probe-download-extract (default
	// DefaultRefreshTimeout); it does not depend on the first caller's
	// context, so one cancelled reader does not fail the others.
	RefreshTimeout time.Duration
	Log            *zap.Logger
	Now            func() time.Time
}

// Stats are counters for tests, benchmarks and metrics.
type Stats struct {
	Probes     int64 // HEAD probes sent
	Downloads  int64 // objects downloaded and extracted
	Failures   int64 // downloads that failed
	Evictions  int64 // copies evicted by the disk budget
	Reconciled int64 // checkpoint rows written by reconcile
	// BytesFetched counts the object bytes downloaded (bases and
	// increments).
	BytesFetched int64
}

// Manager owns the hydrated copies of one replica. It is safe for
// concurrent use.
type Manager struct {
	opts Options
	log  *zap.Logger
	sf   singleflight.Group

	mu       sync.Mutex
	projects map[string]*project
	seq      uint64

	probes, downloads, failures, evictions, reconciled, fetched atomic.Int64
	removals                                                    sync.WaitGroup
}

type project struct {
	id       string
	cur      *version
	lastUsed time.Time
	// failETag is the ETag of an object that failed to hydrate as corrupt;
	// it is not downloaded again until the ETag changes.
	failETag string
	failErr  error
}

type version struct {
	dir        string
	info       objstore.ObjectInfo
	bytes      int64
	hydratedAt time.Time
	refs       int
	retired    bool
	// headRef is HEAD's branch if it existed when hydrated (intact).
	headRef string
	// base and applied: for a copy hydrated from a manifest, the base it
	// was made from and the increments it holds (nil: a legacy copy).
	base    objstore.ObjectInfo
	applied map[string]bool
}

// New returns a Manager and empties opts.Dir (copies of an earlier process
// are not trusted: their ETags are not known).
func New(opts Options) (*Manager, error) {
	if opts.Store == nil || opts.Dir == "" {
		return nil, errors.New("hydrate: Store and Dir are required")
	}
	if opts.Runner == nil {
		opts.Runner = &gitrun.Runner{}
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.RefreshTimeout = settings.PositiveOr(opts.RefreshTimeout, DefaultRefreshTimeout)
	if opts.Limits.MaxTotalBytes <= 0 {
		opts.Limits.MaxTotalBytes = DefaultMaxTotalBytes
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	opts.Dir = dir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("hydrate: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("hydrate: %w", err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return nil, fmt.Errorf("hydrate: clearing %s: %w", dir, err)
		}
	}
	return &Manager{opts: opts, log: opts.Log.Named("hydrate"), projects: map[string]*project{}}, nil
}

// Stats returns the counters.
func (m *Manager) Stats() Stats {
	return Stats{Probes: m.probes.Load(), Downloads: m.downloads.Load(), Failures: m.failures.Load(),
		Evictions: m.evictions.Load(), Reconciled: m.reconciled.Load(), BytesFetched: m.fetched.Load()}
}

// Wait blocks until the removal of retired copies started so far is done.
func (m *Manager) Wait() { m.removals.Wait() }

// Repo is one reader's reference to a hydrated copy. The copy stays on disk
// until Release; call Release exactly once (extra calls are no-ops).
type Repo struct {
	ProjectID string
	// GitDir is the repository (a bare git dir).
	GitDir string
	// Object is the durable object this copy was extracted from.
	Object     objstore.ObjectInfo
	HydratedAt time.Time
	// Stale is set when refreshing failed (StaleErr says why) and this is
	// the last good copy.
	Stale    bool
	StaleErr error

	runner *gitrun.Runner
	m      *Manager
	v      *version
	once   sync.Once
}

// Git starts a git command on the copy (GIT_DIR set, cwd the git dir).
func (r *Repo) Git(args ...gitrun.Arg) *gitrun.Cmd {
	return r.runner.Command(args...).Dir(r.GitDir).Env(gitEnv(r.GitDir)...)
}

// Release drops the reference; a retired copy is deleted with its last one.
func (r *Repo) Release() {
	r.once.Do(func() { r.m.release(r.v) })
}

var projectIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)

// Acquire returns the current copy of projectID, refreshing it first.
func (m *Manager) Acquire(ctx context.Context, projectID string) (*Repo, error) {
	if !projectIDRE.MatchString(projectID) {
		return nil, fmt.Errorf("%w: %q", ErrInvalidProject, projectID)
	}
	err := m.refresh(ctx, projectID)
	if err != nil && (errors.Is(err, ErrNotFound) || errors.Is(err, ErrInvalidProject) || ctx.Err() != nil) {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.projects[projectID]
	if p == nil || p.cur == nil {
		if err == nil {
			err = fmt.Errorf("%w: the copy of %s was evicted while being opened", ErrUnavailable, projectID)
		}
		return nil, err
	}
	p.lastUsed = m.opts.Now()
	v := p.cur
	v.refs++
	return &Repo{ProjectID: projectID, GitDir: v.dir, Object: v.info, HydratedAt: v.hydratedAt,
		Stale: err != nil, StaleErr: err, runner: m.opts.Runner, m: m, v: v}, nil
}

// refresh runs one shared probe (and download when needed) per project.
func (m *Manager) refresh(ctx context.Context, projectID string) error {
	ch := m.sf.DoChan(projectID, func() (any, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.opts.RefreshTimeout)
		defer cancel()
		return nil, m.doRefresh(rctx, projectID)
	})
	select {
	case res := <-ch:
		return res.Err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *Manager) doRefresh(ctx context.Context, projectID string) error {
	info, err := m.probe(ctx, projectID)
	if errors.Is(err, ErrNotFound) {
		m.drop(projectID)
		return err
	}
	if err != nil {
		return err
	}
	m.mu.Lock()
	p := m.projects[projectID]
	if p == nil {
		p = &project{id: projectID}
		m.projects[projectID] = p
	}
	p.lastUsed = m.opts.Now()
	if cur := p.cur; cur != nil && cur.info.ETag == info.ETag && cur.info.Key == info.Key {
		m.mu.Unlock()
		err := intact(cur)
		if err == nil {
			return nil
		}
		// A cache never turns into a permanent 500: a copy removed or
		// damaged under this replica (an operator, a second process on
		// the data dir) is hydrated again.
		m.log.Warn("hydrated copy vanished or damaged; hydrating it again", zap.String("projectId", projectID),
			zap.String("dir", cur.dir), zap.Error(err))
		m.retire(projectID, cur)
		m.mu.Lock()
	}
	if p.failETag != "" && p.failETag == info.ETag {
		err := p.failErr
		m.mu.Unlock()
		return err
	}
	m.mu.Unlock()

	download := m.download
	if hasManifest(info, projectID) {
		download = m.downloadManifest
	}
	v, etag, err := download(ctx, projectID)
	if err != nil {
		m.failures.Add(1)
		if errors.Is(err, ErrNotFound) {
			m.drop(projectID)
			return err
		}
		if errors.Is(err, ErrCorrupt) {
			m.mu.Lock()
			if p := m.projects[projectID]; p != nil {
				p.failETag, p.failErr = etag, err
			}
			m.mu.Unlock()
		}
		m.log.Warn("hydrate failed", zap.String("projectId", projectID), zap.String("etag", etag), zap.Error(err))
		return err
	}
	m.downloads.Add(1)
	m.reconcile(ctx, projectID, v.dir)
	m.swap(projectID, v)
	m.log.Debug("hydrated", zap.String("projectId", projectID), zap.String("etag", v.info.ETag),
		zap.Int64("bytes", v.bytes))
	return nil
}

// countingReader remembers an error of the underlying store stream, so a
// broken connection is told apart from a corrupt archive.
type countingReader struct {
	r   io.Reader
	err error
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		c.err = err
	}
	return n, err
}

// download fetches, extracts and prepares a new version; it returns the
// ETag it saw (for remembering a corrupt one).
func (m *Manager) download(ctx context.Context, projectID string) (*version, string, error) {
	key := objstore.RepoKey(projectID)
	rc, info, err := m.opts.Store.Get(ctx, key)
	if errors.Is(err, objstore.ErrNotExist) {
		return nil, "", fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if err != nil {
		return nil, "", fmt.Errorf("%w: get %s: %w", ErrUnavailable, key, err)
	}
	defer rc.Close()
	staging := filepath.Join(m.opts.Dir, ".staging", projectID+"-"+randomHex())
	cleanup := func() { _ = os.RemoveAll(staging) }
	cr := &countingReader{r: rc}
	limits := m.opts.Limits
	limits.NoLinks = true // a .git never holds a link
	st, err := archive.ExtractTarGz(cr, staging, limits)
	if err != nil {
		cleanup()
		if wire.DiskFull(err) {
			return nil, "", fmt.Errorf("%w: extracting %s: %w", ErrDiskFull, key, err)
		}
		if cr.err != nil || ctx.Err() != nil {
			return nil, "", fmt.Errorf("%w: reading %s: %w", ErrUnavailable, key, err)
		}
		return nil, info.ETag, fmt.Errorf("%w: %s (etag %s): %w", ErrCorrupt, key, info.ETag, err)
	}
	if err := m.prepare(ctx, staging); err != nil {
		cleanup()
		if wire.DiskFull(err) {
			return nil, "", fmt.Errorf("%w: preparing %s: %w", ErrDiskFull, key, err)
		}
		if ctx.Err() != nil {
			return nil, "", fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return nil, info.ETag, fmt.Errorf("%w: %s (etag %s): %w", ErrCorrupt, key, info.ETag, err)
	}
	m.fetched.Add(info.Size)
	v, err := m.publishStaging(projectID, staging, info)
	if err != nil {
		return nil, "", err
	}
	v.bytes = st.Bytes
	return v, info.ETag, nil
}

// publishStaging moves a prepared staging directory to a fresh version
// directory of projectID.
func (m *Manager) publishStaging(projectID, staging string, info objstore.ObjectInfo) (*version, error) {
	m.mu.Lock()
	m.seq++
	seq := m.seq
	m.mu.Unlock()
	final := filepath.Join(m.opts.Dir, projectID, fmt.Sprintf("v%08d", seq))
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		_ = os.RemoveAll(staging)
		return nil, err
	}
	if err := os.Rename(staging, final); err != nil {
		_ = os.RemoveAll(staging)
		return nil, err
	}
	return &version{dir: final, info: info, bytes: info.Size, hydratedAt: m.opts.Now(), headRef: headRef(final)}, nil
}

// prepare checks that dir is a git repository and makes it safe to serve:
// the configuration is replaced by our own (the archive's config is written
// by a pod that runs agent code, so no driver, hook path or alternate it
// names may take effect here), hooks, alternates and worktree links are
// removed, and a commit-graph is written for fast log walks.
func (m *Manager) prepare(ctx context.Context, dir string) error {
	fi, err := os.Lstat(filepath.Join(dir, "HEAD"))
	if err != nil || !fi.Mode().IsRegular() {
		return errors.New("no HEAD file: not a git directory")
	}
	if fi, err := os.Lstat(filepath.Join(dir, "objects")); err != nil || !fi.IsDir() {
		return errors.New("no objects directory: not a git directory")
	}
	// The same sanitising as the pod's restore (the archive's config is
	// read as text, never by git), plus what a bare read-only copy does not
	// need.
	if err := repoarchive.Sanitize(dir, "[core]\n\trepositoryformatversion = 0\n\tbare = true\n\tlogAllRefUpdates = false\n[gc]\n\tauto = 0\n",
		"lfs", "gc.pid", "gc.log", "index", "logs"); err != nil {
		return err
	}
	run := func(args ...gitrun.Arg) *gitrun.Cmd {
		return m.opts.Runner.Command(args...).Dir(dir).Env(gitEnv(dir)...)
	}
	if _, err := run("rev-parse", "--git-dir").String(ctx); err != nil {
		return fmt.Errorf("not a usable git directory: %w", err)
	}
	// An unborn HEAD (no commit yet) is a valid, empty repository; a HEAD
	// that names a missing commit is not.
	if ref, err := run("symbolic-ref", "-q", "HEAD").String(ctx); err == nil && ref != "" {
		if _, err := run("rev-parse", "--verify", "-q", "HEAD^{commit}").String(ctx); err != nil &&
			refExists(ctx, run, ref) {
			return fmt.Errorf("HEAD %s does not resolve to a commit: %w", ref, err)
		}
	} else if _, err := run("rev-parse", "--verify", "-q", "HEAD^{commit}").String(ctx); err != nil {
		return fmt.Errorf("detached HEAD does not resolve to a commit: %w", err)
	}
	// The commit-graph makes graph reads fast; writing it also reads every
	// reachable commit, so a repository with missing commits is refused.
	if err := run("commit-graph", "write", "--reachable", "--no-progress").Run(ctx); err != nil {
		return fmt.Errorf("reading commits: %w", err)
	}
	return nil
}

func refExists(ctx context.Context, run func(...gitrun.Arg) *gitrun.Cmd, ref string) bool {
	out, err := run("for-each-ref", "--format=%(refname)").AddDynamic(ref).String(ctx)
	return err == nil && out != ""
}

// gitEnv pins the repository and keeps objects unreplaced.
func gitEnv(dir string) []string {
	return []string{"GIT_DIR=" + dir, "GIT_NO_REPLACE_OBJECTS=1", "GIT_ATTR_NOSYSTEM=1"}
}

// swap publishes v as the current copy of projectID and retires the old.
func (m *Manager) swap(projectID string, v *version) {
	m.mu.Lock()
	p := m.projects[projectID]
	if p == nil {
		p = &project{id: projectID}
		m.projects[projectID] = p
	}
	old := p.cur
	p.cur, p.failETag, p.failErr = v, "", nil
	p.lastUsed = m.opts.Now()
	var remove []string
	if old != nil {
		remove = append(remove, m.retireLocked(old)...)
	}
	remove = append(remove, m.evictLocked(projectID)...)
	m.mu.Unlock()
	m.remove(remove)
}

// retire stops serving v as projectID's current copy (readers holding it
// keep it until they release it).
func (m *Manager) retire(projectID string, v *version) {
	m.mu.Lock()
	var remove []string
	if p := m.projects[projectID]; p != nil && p.cur == v {
		p.cur = nil
		remove = m.retireLocked(v)
	}
	m.mu.Unlock()
	m.remove(remove)
}

// intact is a cheap check (a few stats, no process) that the copy of v is
// still a repository: HEAD, the object store, and HEAD's branch when it
// had one at hydrate time.
func intact(v *version) error {
	if _, err := os.ReadFile(filepath.Join(v.dir, "HEAD")); err != nil {
		return err
	}
	if fi, err := os.Stat(filepath.Join(v.dir, "objects")); err != nil || !fi.IsDir() {
		return fmt.Errorf("no object store: %v", err)
	}
	if v.headRef != "" && !refPresent(v.dir, v.headRef) {
		return fmt.Errorf("HEAD's %s is gone", v.headRef)
	}
	return nil
}

// headRef is the branch HEAD names in the repository at dir when that
// branch exists (loose or packed), else "" (unborn or detached).
func headRef(dir string) string {
	head, err := os.ReadFile(filepath.Join(dir, "HEAD"))
	if err != nil {
		return ""
	}
	ref, ok := strings.CutPrefix(strings.TrimSpace(string(head)), "ref: ")
	if !ok || !strings.HasPrefix(ref, "refs/") || !refPresent(dir, ref) {
		return ""
	}
	return ref
}

func refPresent(dir, ref string) bool {
	if fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(ref))); err == nil && fi.Mode().IsRegular() {
		return true
	}
	packed, err := os.ReadFile(filepath.Join(dir, "packed-refs"))
	return err == nil && strings.Contains(string(packed), " "+ref+"\n")
}

// drop forgets projectID (its object is gone).
func (m *Manager) drop(projectID string) {
	m.mu.Lock()
	var remove []string
	if p := m.projects[projectID]; p != nil {
		if p.cur != nil {
			remove = m.retireLocked(p.cur)
		}
		delete(m.projects, projectID)
	}
	m.mu.Unlock()
	m.remove(remove)
}

// retireLocked marks v retired and returns its dir when no reader holds it.
func (m *Manager) retireLocked(v *version) []string {
	v.retired = true
	if v.refs == 0 {
		return []string{v.dir}
	}
	return nil
}

// evictLocked drops least-recently-used copies (never keep's) until the
// copies fit the disk budget.
func (m *Manager) evictLocked(keep string) []string {
	if m.opts.DiskBudget <= 0 {
		return nil
	}
	var total int64
	var cands []*project
	for _, p := range m.projects {
		if p.cur == nil {
			continue
		}
		total += p.cur.bytes
		if p.id != keep {
			cands = append(cands, p)
		}
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].lastUsed.Before(cands[j].lastUsed) })
	var remove []string
	for _, p := range cands {
		if total <= m.opts.DiskBudget {
			break
		}
		total -= p.cur.bytes
		remove = append(remove, m.retireLocked(p.cur)...)
		delete(m.projects, p.id)
		m.evictions.Add(1)
		m.log.Info("evicted hydrated copy (disk budget)", zap.String("projectId", p.id),
			zap.Int64("bytes", p.cur.bytes), zap.Int64("budget", m.opts.DiskBudget))
	}
	return remove
}

func (m *Manager) release(v *version) {
	m.mu.Lock()
	v.refs--
	gone := v.retired && v.refs == 0
	m.mu.Unlock()
	if gone {
		m.remove([]string{v.dir})
	}
}

// remove deletes retired version dirs in the background.
func (m *Manager) remove(dirs []string) {
	for _, d := range dirs {
		m.removals.Add(1)
		go func() {
			defer m.removals.Done()
			if err := os.RemoveAll(d); err != nil {
				m.log.Warn("removing retired hydrated copy", zap.String("dir", d), zap.Error(err))
			}
			_ = os.Remove(filepath.Dir(d)) // the project dir, when empty
		}()
	}
}

// DiskUsage returns the bytes of the current copies (what the budget counts).
func (m *Manager) DiskUsage() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var total int64
	for _, p := range m.projects {
		if p.cur != nil {
			total += p.cur.bytes
		}
	}
	return total
}

func randomHex() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Adopt records that the durable object now is info and that r's copy
// already holds its content (the API itself wrote it from that copy, in
// dual_shadow's receive): the next Acquire does not download it again.
func (m *Manager) Adopt(r *Repo, info objstore.ObjectInfo) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.projects[r.ProjectID]; p != nil && p.cur == r.v {
		r.v.info = info
	}
}

// Invalidate drops the current copy of projectID, so the next Acquire
// downloads the object again (a receive changed the copy but could not
// make the change durable).
func (m *Manager) Invalidate(projectID string) { m.drop(projectID) }

// Dir is the directory of the copies (scratch space beside them shares
// their file system).
func (m *Manager) Dir() string { return m.opts.Dir }
