package syncstrategy

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/assets"
	"github.com/svc-dev/svc/podagent/internal/checkpoints"
	"github.com/svc-dev/svc/podagent/internal/coldstart"
	"github.com/svc-dev/svc/podagent/internal/durable"
	"github.com/svc-dev/svc/podagent/internal/gitsync"
	"github.com/svc-dev/svc/podagent/internal/lfs"
	"github.com/svc-dev/svc/podagent/internal/s3sync"
	"github.com/svc-dev/svc/podagent/internal/shutdown"
	"github.com/svc-dev/svc/podagent/internal/testhook"
	"github.com/svc-dev/svc/shared/syncmode"
)

// gitOnly is the default (docs/sync-modes.md §1): each turn pushes its
// large files through git-lfs, persists .git to <projectId>/repo.git.tar.gz
// (the durability step) and records the checkpoint; layer 2 is suppressed
// while healthy, and the healthy shutdown writes the HEAD snapshot instead.
type gitOnly struct{}

func (gitOnly) Mode() syncmode.Mode { return syncmode.GitOnly }

// Writer: git_only holds the durable .git persister and the checkpoint
// records.
func (gitOnly) Writer(s Stores) Writer {
	w := &gitOnlyWriter{base: newBase(syncmode.GitOnly, s), repo: s.Repo, persister: s.Persister, recorder: s.Recorder,
		repack: s.Repack, s3: s.S3, large: s.Large.Turn}
	w.metrics.RecordsPending.Set(float64(w.recorder.Len()))
	return w
}

func (gitOnly) Source(o *s3sync.Options, _ *assets.Assets) { o.SuppressProjectArchive = true }

// SuppressSource: a degraded git_only pod writes layer 2 again (spec 3.2).
func (gitOnly) SuppressSource(s *s3sync.S3Sync) func(bool) { return s.SetSuppressProjectArchive }

func (gitOnly) LargeFiles(p Parts) LargeFiles {
	cfg := p.Config
	switch {
	case !cfg.LFS:
		return LargeFiles{}
	case cfg.APIURL == "":
		p.Log.Warn("SVC_LFS=true but SVC_API_URL is empty: large files are committed as ordinary blobs")
		return LargeFiles{}
	}
	large := lfs.New(lfs.Options{Dir: p.Workspace, Runner: p.Runner, APIURL: cfg.APIURL, ProjectID: cfg.ProjectID,
		Token: cfg.RuntimeToken, Threshold: cfg.LargeFileBytes, Log: p.Log})
	return LargeFiles{Turn: large, Cold: large}
}

func (gitOnly) Origin(Parts) *gitsync.Origin { return nil }

func (gitOnly) AfterStart(ctx context.Context, p Started) {
	if !p.Sync.Fenced() {
		migrateLegacyAssets(ctx, p)
	}
}

func (gitOnly) Shutdown(s *shutdown.Steps, p Started) {
	s.Healthy = func() bool { return !p.Machine.Degraded() }
	s.ForceProjectArchive = true
}

// gitOnlyWriter: each commit pushes its large files through git-lfs,
// persists .git (the durability step) and records its checkpoint; then the
// deps layer (layer 2 only when not suppressed).
type gitOnlyWriter struct {
	base
	repo      *gitsync.Repo
	persister *durable.Persister
	recorder  *checkpoints.Recorder
	repack    *gitsync.Repacker
	s3        *s3sync.S3Sync
	large     TurnLargeFiles

	persistMu sync.Mutex  // orders uploads: an older snapshot is never uploaded after a newer one
	dirty     atomic.Bool // HEAD has commits not in the durable object
	lfsPushed atomic.Bool // the last large-file push stored every object
}

func (w *gitOnlyWriter) Restore(ctx context.Context, o coldstart.Options) (coldstart.Result, error) {
	o.Durable = w.persister
	return coldstart.FromGit(ctx, o)
}

// remember journals a commit's checkpoint record (posted once a persist
// made the commit durable).
func (w *gitOnlyWriter) remember(ctx context.Context, c gitsync.Commit) {
	rec := w.repo.CheckpointRecord(ctx, c, w.log)
	if err := w.recorder.Remember(rec); err != nil {
		w.log.Warn("saving checkpoint journal", zap.String("sha", rec.CommitSHA), zap.Error(err))
	}
	testhook.Reach(testhook.AfterCommit)
	w.dirty.Store(true)
}

// Committed: journal the record, push large files, persist .git, then
// record; then layer 1 (layer 2 only when not suppressed).
func (w *gitOnlyWriter) Committed(ctx context.Context, c gitsync.Commit) error {
	w.remember(ctx, c)
	if w.fenced() {
		return w.fence()
	}
	w.pushLargeFiles(ctx)
	if err := w.step(ctx, w.persist); err == nil {
		w.recordPending(ctx)
		w.repack.Maybe()
	}
	if w.s3 != nil && !w.fenced() {
		if err := w.s3.AfterTurn(ctx); err != nil {
			w.log.Warn("s3sync after turn", zap.Error(err))
		}
	}
	if w.fenced() {
		return w.fence()
	}
	return nil
}

// Flush: push large files and persist; a requested or shutdown flush then
// records and makes sure the deps layer exists.
func (w *gitOnlyWriter) Flush(ctx context.Context, f gitsync.FlushEvent) error {
	if f.Commit != nil {
		w.remember(ctx, *f.Commit)
	}
	switch f.Kind {
	case gitsync.FlushTagged:
		w.dirty.Store(true)
		return w.step(ctx, w.persist)
	case gitsync.FlushSeed:
		w.dirty.Store(true)
	}
	if !w.fenced() {
		w.pushLargeFiles(ctx)
	}
	if err := w.step(ctx, w.persist); err != nil || f.Kind == gitsync.FlushSeed {
		return err
	}
	w.recordPending(ctx)
	w.ensureDeps(ctx, w.s3)
	return nil
}

// Resume: if the journal holds commits the durable object may lack,
// persist now; then record what is persisted.
func (w *gitOnlyWriter) Resume(ctx context.Context) {
	if w.unpersisted() {
		w.dirty.Store(true)
		w.log.Info("resuming: persisting commits made before a restart")
		w.pushLargeFiles(ctx)
		if err := w.step(ctx, w.persist); err != nil {
			return
		}
	}
	w.recordPending(ctx)
}

// Owed: a persist. Records of persisted commits are not owed here: the
// persist released them in the hand-over queue, whose drain loop retries
// them with its own backoff (docs/sync-modes.md §12).
func (w *gitOnlyWriter) Owed() bool { return w.dirty.Load() }

// Retry persists; the persist releases the commits' records to the
// hand-over queue and wakes it.
func (w *gitOnlyWriter) Retry(ctx context.Context) bool {
	if !w.dirty.Load() {
		return true
	}
	return w.step(ctx, w.persist) == nil
}

// RolledBack: git-lfs pulls the real bytes of the rewritten tree back.
func (w *gitOnlyWriter) RolledBack(ctx context.Context) {
	if p, ok := w.large.(interface{ Pull(context.Context) error }); ok {
		if err := p.Pull(ctx); err != nil {
			w.log.Warn("large-file pull after rollback", zap.Error(err))
		}
	}
}

// unpersisted reports whether the journal holds commits not persisted
// yet.
func (w *gitOnlyWriter) unpersisted() bool {
	for _, e := range w.recorder.Pending() {
		if !e.Persisted {
			return true
		}
	}
	return false
}

// recordPending posts the persisted, unrecorded commits now, through the
// hand-over queue (a turn's own record, a flush, the resume). Failures are
// not durability failures; the entries stay queued and the queue's drain
// loop retries them.
func (w *gitOnlyWriter) recordPending(ctx context.Context) { _ = w.postRecords(ctx) }

// postRecords is the one call that hands checkpoint records to the API:
// the persisted, unrecorded commits of the journal, once. A fenced pod
// posts none.
func (w *gitOnlyWriter) postRecords(ctx context.Context) error {
	if w.fenced() {
		return w.fence()
	}
	return w.recorder.Flush(ctx)
}

// pushLargeFiles pushes the large-file bytes not yet stored (spec 10.3) and
// remembers the outcome: the next .git archive leaves the local large-file
// cache out only if this push succeeded.
func (w *gitOnlyWriter) pushLargeFiles(ctx context.Context) {
	if w.large == nil {
		return
	}
	err := w.large.Push(ctx)
	w.lfsPushed.Store(err == nil)
	if err != nil {
		w.log.Warn("large-file push failed; the .git archive keeps the local large-file cache", zap.Error(err))
	}
}

// persist is git_only's durability step: snapshot .git under the
// repository lock, upload it with bounded retries, then mark the journal's
// commits persisted.
func (w *gitOnlyWriter) persist(ctx context.Context) error {
	w.persistMu.Lock()
	defer w.persistMu.Unlock()
	start := time.Now()
	defer func() { w.metrics.PersistDuration.Observe(time.Since(start).Seconds()) }()
	includeLFS := w.large != nil && !w.lfsPushed.Load()

	w.repo.Lock()
	snap, err := w.persister.Snapshot(ctx, includeLFS)
	shas := w.recorder.PendingSHAs()
	w.repo.Unlock()
	if err != nil {
		return err
	}
	defer snap.Remove()
	err = w.upload(ctx, "persist", func(ctx context.Context) error {
		_, err := w.persister.Upload(ctx, snap)
		return err
	})
	if err != nil {
		return err
	}
	w.dirty.Store(false)
	// Release the records: the queue's drain loop posts them from here on.
	if err := w.recorder.MarkPersisted(shas); err != nil {
		w.log.Warn("saving checkpoint journal", zap.Error(err))
	}
	w.recorder.Wake()
	w.log.Info("persisted .git", zap.String("key", w.persister.Key()), zap.Int64("bytes", snap.Size),
		zap.Duration("took", time.Since(start)), zap.String("etag", w.persister.ETag()))
	testhook.Reach(testhook.AfterPersist)
	return nil
}
