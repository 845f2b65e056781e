// Package gitsync is GitWorkspaceSync, the pod's mode-free turn engine
// (spec 3.1, 10.1): the pod commits each turn locally, then the mode's
// Strategy (package syncstrategy; docs/sync-modes.md §12) says what the turn
// does after its commit — in git_only persist .git to
// <projectId>/repo.git.tar.gz and record the checkpoint — through Writes,
// the one ownership-checked write path.
//
// Concurrency: turns, rollbacks, flushes and the shutdown flush are
// serialised by the pod's one turn lock (package turn's Slot), which its
// caller holds around the agent's tools and the commit alike. The engine
// lock only orders the engine's own state against the background retry
// loop (a retry never runs inside a commit). Inside it, stage+commit and the .git snapshot each take the
// repository lock (the "one lock around commit + snapshot" of docs/design.md §6),
// so a snapshot never sees a half-written commit. Uploads are ordered by the
// persist lock, so an older snapshot can never be uploaded after a newer one.
package gitsync

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/sethvargo/go-retry"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/checkpoints"
	"github.com/svc-dev/svc/podagent/internal/degrade"
	"github.com/svc-dev/svc/podagent/internal/durable"
	"github.com/svc-dev/svc/podagent/internal/ownership"
	"github.com/svc-dev/svc/podagent/internal/s3sync"
	"github.com/svc-dev/svc/podagent/internal/testhook"
	"github.com/svc-dev/svc/shared/settings"
	"github.com/svc-dev/svc/shared/syncmode"
	"github.com/svc-dev/svc/shared/wire"
)

var (
	// ErrNotPersisted is returned by Flush when the commit could not be
	// persisted (the turn's commit exists locally; git keeps retrying).
	ErrNotPersisted = errors.New("gitsync: .git could not be persisted")
	// ErrClosed is returned once Drain has been called.
	ErrClosed = errors.New("gitsync: shutting down")
	// ErrFenced: another pod owns the project; this pod writes nothing
	// (ownership.ErrFenced).
	ErrFenced = ownership.ErrFenced
)

// LargeFiles is the large-file hook of a turn (spec 10.3); nil disables it.
type LargeFiles interface {
	// TrackLarge tracks files over the threshold before add.
	TrackLarge(ctx context.Context) error
	// Push uploads the large-file bytes not yet stored, after commit; nil
	// means every object of the local cache is stored (the .git archive
	// then omits the cache).
	Push(ctx context.Context) error
}

// Options configure a GitWorkspaceSync.
type Options struct {
	// Strategy is what the mode does after a commit (docs/sync-modes.md
	// §1, §12), chosen once at start (syncstrategy.For); required.
	Strategy  Strategy
	Origin    *Origin
	Repo      *Repo
	Persister *durable.Persister
	// Lease fences every durable write of the pod, in every mode
	// (docs/sync-modes.md §11); nil means the Persister's.
	Lease    *ownership.Lease
	Recorder *checkpoints.Recorder
	Machine  *degrade.Machine
	S3       *s3sync.S3Sync
	LFS      LargeFiles
	Metrics  *Metrics
	Log      *zap.Logger

	// PersistAttempts is how many uploads one durability step tries
	// (default 3); PersistBackoff the first wait between them (default
	// 200ms, exponential); PersistTimeout bounds one attempt (default 60s).
	PersistAttempts int
	PersistBackoff  time.Duration
	PersistTimeout  time.Duration
	// RetryMin and RetryMax bound the background retry backoff while
	// degraded or while records are pending (defaults 1s and 60s).
	RetryMin, RetryMax time.Duration
	// RepackLooseObjects: once a persist finds more loose objects than
	// this, they are packed in the background under the commit lock, so a
	// restore's cost follows the pack count, not the turn count (pods set
	// gc.auto=0). 0 means DefaultRepackLooseObjects; negative disables.
	RepackLooseObjects int
	// RepackTimeout bounds one repack (default 60s).
	RepackTimeout time.Duration
}

// DefaultRepackLooseObjects is the default loose-object threshold: about
// 25 turns of a typical project (a turn writes a commit, a few trees and
// the changed blobs).
const DefaultRepackLooseObjects = 256

// GitWorkspaceSync drives turns. Create with New after cold start.
type GitWorkspaceSync struct {
	o     Options
	log   *zap.Logger
	strat Strategy
	w     *Writes

	engineMu  sync.Mutex // the engine's state against the retry loop; turns are the Slot's
	repoMu    sync.Mutex // commit + snapshot
	persistMu sync.Mutex // orders uploads
	closed    bool       // guarded by engineMu

	dirty     atomic.Bool // HEAD has commits not in the durable object (or origin)
	s3Owed    atomic.Bool // the last S3 write of a turn failed (s3, dual_shadow)
	lfsPushed atomic.Bool

	kick chan struct{}

	bgCtx     context.Context // background maintenance; Close cancels it
	bgCancel  context.CancelFunc
	bg        sync.WaitGroup
	repacking atomic.Bool
}

// New returns a GitWorkspaceSync.
func New(o Options) *GitWorkspaceSync {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	o.PersistAttempts = settings.PositiveOr(o.PersistAttempts, 3)
	o.PersistBackoff = settings.PositiveOr(o.PersistBackoff, 200*time.Millisecond)
	o.PersistTimeout = settings.PositiveOr(o.PersistTimeout, 60*time.Second)
	o.RetryMin = settings.PositiveOr(o.RetryMin, time.Second)
	o.RetryMax = settings.PositiveOr(o.RetryMax, time.Minute)
	if o.Strategy == nil {
		panic("gitsync: Options.Strategy is required (syncstrategy.For)")
	}
	if o.Lease == nil {
		o.Lease = o.Persister.Lease()
	}
	if o.RepackLooseObjects == 0 {
		o.RepackLooseObjects = DefaultRepackLooseObjects
	}
	o.RepackTimeout = settings.PositiveOr(o.RepackTimeout, time.Minute)
	g := &GitWorkspaceSync{o: o, log: o.Log.Named("gitsync"), kick: make(chan struct{}, 1), strat: o.Strategy}
	g.w = &Writes{g: g}
	g.bgCtx, g.bgCancel = context.WithCancel(context.Background())
	if o.Recorder != nil && o.Metrics != nil {
		o.Metrics.RecordsPending.Set(float64(o.Recorder.Len()))
	}
	if o.Persister.Fenced() && o.Metrics != nil {
		o.Metrics.Fenced.Set(1)
	}
	return g
}

// Repo returns the repository.
func (g *GitWorkspaceSync) Repo() *Repo { return g.o.Repo }

// Mode returns the sync mode the sync was built for.
func (g *GitWorkspaceSync) Mode() syncmode.Mode { return g.strat.Mode() }

// Healthy reports whether the durability state is healthy.
func (g *GitWorkspaceSync) Healthy() bool { return !g.o.Machine.Degraded() }

// Fenced reports whether another pod owns the project.
func (g *GitWorkspaceSync) Fenced() bool { return g.o.Lease.Fenced() }

// Turn is one agent turn: stage, commit locally (fixed author, message),
// then afterCommit(sha). A turn that changed no file makes no commit and
// returns "". A persist failure does not fail the turn (the commit exists
// and the degrade machine takes over); only a failed commit, a fenced
// project or a closed sync return an error.
func (g *GitWorkspaceSync) Turn(ctx context.Context, message string) (string, error) {
	g.engineMu.Lock()
	defer g.engineMu.Unlock()
	if g.closed {
		return "", ErrClosed
	}
	sha, err := g.commitLocked(ctx, message)
	if err != nil || sha == "" {
		return sha, err
	}
	g.afterCommit(ctx, sha)
	if g.Fenced() {
		return sha, ErrFenced
	}
	return sha, nil
}

// commitLocked stages and commits under the repository lock, and remembers
// the commit in the checkpoint journal before returning.
func (g *GitWorkspaceSync) commitLocked(ctx context.Context, message string) (string, error) {
	if g.Fenced() {
		return "", ErrFenced
	}
	if message == "" {
		message = "agent turn"
	}
	g.repoMu.Lock()
	sha, err := func() (string, error) {
		g.removeStaleLocks()
		if g.o.LFS != nil {
			if err := g.o.LFS.TrackLarge(ctx); err != nil {
				g.log.Warn("tracking large files", zap.Error(err))
			}
		}
		if err := g.o.Repo.StageAll(ctx); err != nil {
			return "", fmt.Errorf("gitsync: stage: %w", err)
		}
		changed, err := g.o.Repo.HasStagedChanges(ctx)
		if err != nil || !changed {
			return "", err
		}
		sha, err := g.o.Repo.Commit(ctx, message, false)
		if err != nil {
			return "", fmt.Errorf("gitsync: commit: %w", err)
		}
		return sha, nil
	}()
	g.repoMu.Unlock()
	if err != nil || sha == "" {
		return "", err
	}
	g.dirty.Store(true)
	turn, terr := g.o.Repo.Turn(ctx, sha)
	if terr != nil {
		g.log.Warn("reading the turn number", zap.String("sha", sha), zap.Error(terr))
	}
	g.strat.Committed(ctx, g.w, Commit{SHA: sha, Turn: turn, Message: message})
	g.log.Info("committed turn", zap.String("sha", sha), zap.Int64("turn", turn), zap.String("mode", string(g.Mode())))
	testhook.Reach(testhook.AfterCommit)
	return sha, nil
}

// removeStaleLocks clears lock files a killed git process left (under
// repoMu: none of the pod's own git writers runs).
func (g *GitWorkspaceSync) removeStaleLocks() {
	removed, err := g.o.Repo.RemoveStaleLocks()
	if len(removed) > 0 {
		g.log.Warn("removed stale git lock files", zap.Strings("files", removed))
	}
	if err != nil {
		g.log.Warn("removing stale git lock files", zap.Error(err))
	}
}

// afterCommit is spec 6's afterCommit(sha): what the mode's strategy does
// after a commit (git_only: push large files, persist .git, record, the
// deps layer; s3 and dual_shadow: the S3 layers, then the push).
func (g *GitWorkspaceSync) afterCommit(ctx context.Context, _ string) {
	g.strat.AfterCommit(ctx, g.w)
}

// s3Write is the per-turn S3 write of s3 and dual_shadow: large files as
// assets, then layer 1 and layer 2. A failure is retried by Run.
func (g *GitWorkspaceSync) s3Write(ctx context.Context) error {
	if g.o.S3 == nil {
		return nil
	}
	err := g.o.Lease.Check(ctx)
	if err == nil && g.o.LFS != nil {
		err = g.o.LFS.Push(ctx)
	}
	if err == nil || !errors.Is(err, ErrFenced) {
		err = errors.Join(err, g.o.S3.AfterTurn(ctx))
	}
	if errors.Is(err, ErrFenced) || g.Fenced() {
		g.s3Owed.Store(false)
		g.markFenced()
		return ErrFenced
	}
	g.s3Owed.Store(err != nil)
	if err != nil {
		if g.o.Metrics != nil {
			g.o.Metrics.PersistFailures.Inc()
		}
		g.log.Warn("S3 write of the turn failed; retrying in the background", zap.Error(err))
		g.poke()
	}
	return err
}

// markFenced sets the fenced gauge.
func (g *GitWorkspaceSync) markFenced() {
	if g.o.Metrics != nil {
		g.o.Metrics.Fenced.Set(1)
	}
}

// pushLargeFiles pushes the large-file bytes not yet stored (spec 10.3) and
// remembers the outcome: the next .git archive leaves the local large-file
// cache out only if this push succeeded.
func (g *GitWorkspaceSync) pushLargeFiles(ctx context.Context) {
	if g.o.LFS == nil {
		return
	}
	err := g.o.LFS.Push(ctx)
	g.lfsPushed.Store(err == nil)
	if err != nil {
		g.log.Warn("large-file push failed; the .git archive keeps the local large-file cache", zap.Error(err))
	}
}

// persistStep is one durability step: snapshot under the repository lock,
// upload with bounded retries, report the outcome to the degrade machine.
func (g *GitWorkspaceSync) persistStep(ctx context.Context) error {
	counted, err := g.strat.Durability(ctx, g.w)
	if !counted {
		return err
	}
	switch {
	case err == nil:
		g.o.Machine.Success()
	case errors.Is(err, ErrFenced):
		// Not a transient durability failure: the pod stops writing.
		g.markFenced()
	default:
		if g.o.Metrics != nil {
			g.o.Metrics.PersistFailures.Inc()
		}
		g.log.Warn("durability step failed", zap.String("mode", string(g.Mode())), zap.Error(err),
			zap.Int("consecutiveFailures", g.o.Machine.ConsecutiveFailures()+1))
		g.o.Machine.Failure(err)
		g.poke()
	}
	if g.o.Metrics != nil {
		g.o.Metrics.Degraded.Set(boolGauge(g.o.Machine.Degraded()))
	}
	return err
}

// push is the durability step of dual_shadow: push the branch and tags to
// the API origin, which makes them durable and writes the rows.
func (g *GitWorkspaceSync) push(ctx context.Context) error {
	g.persistMu.Lock()
	defer g.persistMu.Unlock()
	if g.o.Origin == nil {
		return errors.New("gitsync: dual_shadow without an origin (SVC_API_URL)")
	}
	// The push is fenced like every write: the ownership record is checked
	// before and after, and the API refuses (409) the push of a pod whose
	// epoch is not the record's; a transient failure degrades.
	if err := g.o.Lease.Check(ctx); err != nil {
		return err
	}
	testhook.Reach(testhook.BeforePush)
	start := time.Now()
	b := retry.WithMaxRetries(uint64(g.o.PersistAttempts-1), retry.NewExponential(g.o.PersistBackoff))
	err := retry.Do(ctx, b, func(ctx context.Context) error {
		actx, cancel := context.WithTimeout(ctx, g.o.PersistTimeout)
		defer cancel()
		err := g.o.Origin.Push(actx, g.o.Repo)
		if errors.Is(err, ErrOriginFenced) {
			return g.o.Lease.Fence(err.Error())
		}
		if err != nil {
			g.log.Debug("push attempt failed", zap.Error(err))
			return retry.RetryableError(err)
		}
		return nil
	})
	if g.o.Metrics != nil {
		g.o.Metrics.PersistDuration.Observe(time.Since(start).Seconds())
	}
	if err != nil && !errors.Is(err, ErrFenced) {
		// Tell "someone else owns the project" from a transient failure.
		if cerr := g.o.Lease.Check(ctx); errors.Is(cerr, ErrFenced) {
			return cerr
		}
	}
	if err == nil {
		err = g.o.Lease.Check(ctx)
	}
	if err != nil {
		return err
	}
	g.dirty.Store(false)
	g.log.Info("pushed to origin", zap.String("origin", g.o.Origin.URL()), zap.Duration("took", time.Since(start)))
	testhook.Reach(testhook.AfterPersist)
	return nil
}

func (g *GitWorkspaceSync) persist(ctx context.Context) error {
	g.persistMu.Lock()
	defer g.persistMu.Unlock()
	start := time.Now()
	defer func() {
		if g.o.Metrics != nil {
			g.o.Metrics.PersistDuration.Observe(time.Since(start).Seconds())
		}
	}()
	includeLFS := g.o.LFS != nil && !g.lfsPushed.Load()

	g.repoMu.Lock()
	snap, err := g.o.Persister.Snapshot(ctx, includeLFS)
	shas := g.o.Recorder.PendingSHAs()
	g.repoMu.Unlock()
	if err != nil {
		return err
	}
	defer snap.Remove()

	b := retry.WithMaxRetries(uint64(g.o.PersistAttempts-1), retry.NewExponential(g.o.PersistBackoff))
	err = retry.Do(ctx, b, func(ctx context.Context) error {
		actx, cancel := context.WithTimeout(ctx, g.o.PersistTimeout)
		defer cancel()
		_, err := g.o.Persister.Upload(actx, snap)
		if err != nil && !errors.Is(err, durable.ErrFenced) {
			g.log.Debug("persist attempt failed", zap.Error(err))
			return retry.RetryableError(err)
		}
		return err
	})
	if err != nil {
		return err
	}
	g.dirty.Store(false)
	if err := g.o.Recorder.MarkPersisted(shas); err != nil {
		g.log.Warn("saving checkpoint journal", zap.Error(err))
	}
	g.log.Info("persisted .git", zap.String("key", g.o.Persister.Key()), zap.Int64("bytes", snap.Size),
		zap.Duration("took", time.Since(start)), zap.String("etag", g.o.Persister.ETag()))
	testhook.Reach(testhook.AfterPersist)
	return nil
}

// ensureDeps makes sure the deps layer of the current lockfile exists
// (git-flush and the shutdown flush; turns upload it in the background). A
// failure is logged, not returned: the layer is a cache of node_modules and
// .git is already durable.
func (g *GitWorkspaceSync) ensureDeps(ctx context.Context) {
	if g.o.S3 == nil || g.Fenced() {
		return
	}
	if err := g.o.Lease.Check(ctx); err != nil {
		return
	}
	if err := g.o.S3.EnsureDeps(ctx); err != nil {
		g.log.Warn("deps layer upload failed", zap.Error(err))
	}
}

// maybeRepack packs loose objects in the background once there are more
// than RepackLooseObjects (see Options). One runs at a time; it holds the
// repository (commit) lock, so no commit or snapshot sees a half-done
// repack, and it is bounded by RepackTimeout.
func (g *GitWorkspaceSync) maybeRepack() {
	if g.o.RepackLooseObjects < 0 || !g.repacking.CompareAndSwap(false, true) {
		return
	}
	g.bg.Add(1)
	go func() {
		defer g.bg.Done()
		defer g.repacking.Store(false)
		loose, err := g.o.Repo.LooseObjects()
		if err != nil || loose <= g.o.RepackLooseObjects {
			return
		}
		ctx, cancel := context.WithTimeout(g.bgCtx, g.o.RepackTimeout)
		defer cancel()
		start := time.Now()
		g.repoMu.Lock()
		packs, err := g.o.Repo.Repack(ctx)
		g.repoMu.Unlock()
		if err != nil {
			g.log.Warn("packing loose objects failed", zap.Int("loose", loose), zap.Error(err))
			return
		}
		g.log.Info("packed loose objects", zap.Int("loose", loose), zap.Int("packs", packs), zap.Duration("took", time.Since(start)))
	}()
}

// WaitBackground waits for background maintenance (a repack) to end.
func (g *GitWorkspaceSync) WaitBackground() { g.bg.Wait() }

// Close cancels background maintenance and waits for it.
func (g *GitWorkspaceSync) Close() {
	g.bgCancel()
	g.bg.Wait()
}

// recordPending posts the persisted, unrecorded commits. Failures are not
// durability failures; the background loop retries them.
func (g *GitWorkspaceSync) recordPending(ctx context.Context) {
	if err := g.o.Recorder.Flush(ctx); err != nil {
		g.poke()
	}
}

// FlushOptions are the options of Flush (POST /agent/git-flush).
type FlushOptions struct {
	Message    string // commit message for pending changes
	Tag        string // annotated tag to create at HEAD (validated by the caller)
	TagMessage string
	// Timeout bounds the whole flush (spec 10.2.2 uses 5000 ms).
	Timeout time.Duration
	// skipS3: the shutdown flush leaves the S3 write to the S3 flush step.
	skipS3 bool
}

// Flush commits pending changes (if any), persists .git and records; with
// a tag it then creates the annotated tag and persists again (spec 10.4).
// It fails with ErrNotPersisted unless the durable object holds the result.
func (g *GitWorkspaceSync) Flush(ctx context.Context, fo FlushOptions) (wire.GitFlushResponse, error) {
	if fo.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, fo.Timeout)
		defer cancel()
	}
	g.engineMu.Lock()
	defer g.engineMu.Unlock()
	if g.closed {
		return wire.GitFlushResponse{}, ErrClosed
	}
	return g.flushLocked(ctx, fo)
}

func (g *GitWorkspaceSync) flushLocked(ctx context.Context, fo FlushOptions) (wire.GitFlushResponse, error) {
	if g.Fenced() {
		return wire.GitFlushResponse{}, ErrFenced
	}
	msg := fo.Message
	if msg == "" {
		msg = "git-flush"
	}
	if _, err := g.commitLocked(ctx, msg); err != nil {
		return wire.GitFlushResponse{}, err
	}
	if err := g.strat.FlushWrites(ctx, g.w, fo.skipS3); errors.Is(err, ErrFenced) {
		return wire.GitFlushResponse{}, err
	} else if err != nil {
		return wire.GitFlushResponse{}, errors.Join(ErrNotPersisted, err)
	}
	if err := g.persistStep(ctx); errors.Is(err, ErrFenced) {
		return wire.GitFlushResponse{}, err
	} else if err != nil {
		return wire.GitFlushResponse{}, errors.Join(ErrNotPersisted, err)
	}
	g.strat.AfterFlush(ctx, g.w)
	g.ensureDeps(ctx)
	head, err := g.o.Repo.Head(ctx)
	if err != nil {
		return wire.GitFlushResponse{}, err
	}
	resp := wire.GitFlushResponse{SHA: head}
	if fo.Tag == "" {
		return resp, nil
	}
	if head == "" {
		return resp, errors.New("gitsync: nothing to tag: the repository has no commit")
	}
	g.repoMu.Lock()
	err = g.o.Repo.Tag(ctx, fo.Tag, fo.TagMessage)
	g.repoMu.Unlock()
	if err != nil {
		return resp, err
	}
	g.dirty.Store(true)
	if err := g.persistStep(ctx); err != nil {
		return resp, errors.Join(ErrNotPersisted, err)
	}
	resp.Tag = fo.Tag
	return resp, nil
}

// Drain stops new turns and waits for the one in flight (spec 10.2.1).
func (g *GitWorkspaceSync) Drain(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		g.engineMu.Lock()
		g.closed = true
		g.engineMu.Unlock()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// FinalFlush is the shutdown git flush (spec 10.2.2): after Drain, commit
// pending changes and persist within timeout. Success leaves or exits the
// degraded state; failure leaves it degraded (the machine is told either
// way by persistStep).
func (g *GitWorkspaceSync) FinalFlush(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	g.engineMu.Lock()
	defer g.engineMu.Unlock()
	_, err := g.flushLocked(ctx, FlushOptions{Message: "shutdown flush", skipS3: true})
	return err
}

// SnapshotHEAD writes HEAD's content (without node_modules) as a tar.gz to
// a temp file and returns its path (spec 10.2.3).
func (g *GitWorkspaceSync) SnapshotHEAD(ctx context.Context) (string, error) {
	f, err := os.CreateTemp("", "project-src-*.tar.gz")
	if err != nil {
		return "", err
	}
	zw, _ := gzip.NewWriterLevel(f, gzip.DefaultCompression)
	if head, err := g.o.Repo.Head(ctx); err == nil {
		zw.Header.Comment = wire.SourceHeadComment(head)
	}
	g.repoMu.Lock()
	err = g.o.Repo.ArchiveHEAD(ctx, zw)
	g.repoMu.Unlock()
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// PersistNow pushes large files and runs one durability step outside a
// turn (the cold-start seed).
func (g *GitWorkspaceSync) PersistNow(ctx context.Context) error {
	g.engineMu.Lock()
	defer g.engineMu.Unlock()
	g.dirty.Store(true)
	g.pushLargeFiles(ctx)
	return g.persistStep(ctx)
}

// Resume finishes what a crash interrupted: if the journal holds commits
// the durable object may lack, persist now; then record what is persisted.
// Called once at start, after cold start.
func (g *GitWorkspaceSync) Resume(ctx context.Context) {
	g.engineMu.Lock()
	defer g.engineMu.Unlock()
	if g.Fenced() {
		return
	}
	g.strat.Resume(ctx, g.w)
}

// Run is the background retry loop: while degraded (or while a persist is
// owed) it retries the persist with exponential backoff, and it retries
// pending checkpoint records. It returns when ctx ends.
func (g *GitWorkspaceSync) Run(ctx context.Context) {
	backoff := g.newBackoff()
	for {
		var wait <-chan time.Time
		var t *time.Timer
		if g.needsWork() {
			d, _ := backoff.Next()
			t = time.NewTimer(d)
			wait = t.C
		}
		fired := false
		select {
		case <-ctx.Done():
		case <-g.kick:
		case <-wait:
			fired = true
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return
		}
		if !fired {
			continue // re-evaluate; the next pass waits a backoff step
		}
		if g.retryOnce(ctx) {
			backoff = g.newBackoff()
		}
	}
}

func (g *GitWorkspaceSync) newBackoff() retry.Backoff {
	return retry.WithJitterPercent(10, retry.WithCappedDuration(g.o.RetryMax, retry.NewExponential(g.o.RetryMin)))
}

func (g *GitWorkspaceSync) needsWork() bool {
	if g.Fenced() {
		return false
	}
	// A failed durability step is retried in the background right away,
	// below the degrade threshold too (docs/sync-modes.md §1).
	if g.dirty.Load() || g.s3Owed.Load() {
		return true
	}
	return g.strat.Owed(g.w)
}

// retryOnce makes one background attempt; it reports whether all work is done.
func (g *GitWorkspaceSync) retryOnce(ctx context.Context) bool {
	g.engineMu.Lock()
	defer g.engineMu.Unlock()
	if g.closed || g.Fenced() {
		return true
	}
	if g.s3Owed.Load() {
		if err := g.s3Write(ctx); err != nil {
			return false
		}
	}
	if g.dirty.Load() {
		if err := g.persistStep(ctx); err != nil {
			return false
		}
	}
	return g.strat.Retry(ctx, g.w)
}

func (g *GitWorkspaceSync) poke() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
