package gitsync

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/syncmode"
	"github.com/svc-dev/svc/shared/wire"
)

// Strategy is what one sync mode does around the mode-free turn engine
// (docs/sync-modes.md §12). Its three implementations, and the only code
// that tells the modes apart, are in package syncstrategy; the engine calls
// them under the turn lock. A strategy writes nothing itself: every durable
// write goes through the *Writes it is handed, the ownership-checked path.
type Strategy interface {
	// Mode names the mode (log fields and the degrade log line only).
	Mode() syncmode.Mode
	// Committed runs right after a local commit, before anything is
	// written: git_only journals the commit's checkpoint record there.
	Committed(ctx context.Context, w *Writes, c Commit)
	// AfterCommit is what a turn (or a rollback) does after its commit.
	AfterCommit(ctx context.Context, w *Writes)
	// Durability is one durability step of the mode (w.Step runs it and
	// reports it to the degrade machine); counted=false: the mode has none.
	Durability(ctx context.Context, w *Writes) (counted bool, err error)
	// FlushWrites is what a flush writes before its durability step;
	// skipSource: the shutdown flush leaves layer 2 to the S3 flush. An
	// error fails the flush (ErrNotPersisted, or ErrFenced).
	FlushWrites(ctx context.Context, w *Writes, skipSource bool) error
	// AfterFlush runs once a flush's durability step succeeded.
	AfterFlush(ctx context.Context, w *Writes)
	// Resume finishes, at start, what a crash interrupted.
	Resume(ctx context.Context, w *Writes)
	// Owed reports background work beyond the engine's own (a persist or a
	// source write owed): pending checkpoint records.
	Owed(w *Writes) bool
	// Retry is the mode's part of one background attempt, after the
	// engine's; it reports whether all work is done.
	Retry(ctx context.Context, w *Writes) bool
	// AfterRollback runs after a rollback reset the work tree, before its
	// commit (git-lfs pulls the real bytes back).
	AfterRollback(ctx context.Context, w *Writes)
}

// Writes is the only way a Strategy writes: each method refuses once the
// pod is fenced, writes through the ownership-checked stores (the
// durable.Persister, S3Sync, the assets and the origin push all put
// through ownership.Lease), and turns a lost claim into the fenced state.
// A new mode gets its writes from here and so cannot skip the fencing.
type Writes struct{ g *GitWorkspaceSync }

// fenced is the check every write starts with and the mark a fenced
// outcome leaves (the metric; the Lease itself is already fenced).
func (w *Writes) fenced(err error) error {
	if errors.Is(err, ErrFenced) || w.g.Fenced() {
		w.g.markFenced()
		return ErrFenced
	}
	return err
}

// Fenced reports whether another pod owns the project.
func (w *Writes) Fenced() bool { return w.g.Fenced() }

// Step runs one durability step of the strategy and reports the outcome to
// the degrade machine (a fenced outcome is not a durability failure).
func (w *Writes) Step(ctx context.Context) error {
	if w.g.Fenced() {
		return w.fenced(nil)
	}
	return w.g.persistStep(ctx)
}

// PersistGit persists .git to <projectId>/repo.git.tar.gz (git_only's
// durability step), fenced by the Persister's lease.
func (w *Writes) PersistGit(ctx context.Context) error {
	if w.g.Fenced() {
		return w.fenced(nil)
	}
	err := w.g.persist(ctx)
	if errors.Is(err, ErrFenced) {
		return w.fenced(err)
	}
	return err
}

// PushOrigin pushes to the API origin (dual_shadow's durability step),
// with this pod's epoch, the record checked before and after.
func (w *Writes) PushOrigin(ctx context.Context) error {
	if w.g.Fenced() {
		return w.fenced(nil)
	}
	err := w.g.push(ctx)
	if errors.Is(err, ErrFenced) {
		return w.fenced(err)
	}
	return err
}

// WriteSource is the per-turn S3 write of s3 and dual_shadow: large files
// as assets, then layers 1 and 2. A failure is retried by Run.
func (w *Writes) WriteSource(ctx context.Context) error {
	if w.g.Fenced() {
		w.g.s3Owed.Store(false)
		return w.fenced(nil)
	}
	return w.g.s3Write(ctx)
}

// UpdateLayers is git_only's per-turn S3 write: the deps layer when the
// lockfile changed (layer 2 is suppressed unless degraded).
func (w *Writes) UpdateLayers(ctx context.Context) {
	if w.g.o.S3 == nil || w.g.Fenced() {
		return
	}
	if err := w.g.o.S3.AfterTurn(ctx); err != nil {
		w.g.log.Warn("s3sync after turn", zap.Error(err))
	}
}

// PushLargeFiles pushes git-lfs bytes not yet stored (see pushLargeFiles).
func (w *Writes) PushLargeFiles(ctx context.Context) {
	if w.g.Fenced() {
		return
	}
	w.g.pushLargeFiles(ctx)
}

// PullLargeFiles repopulates large files after the work tree was rewritten.
func (w *Writes) PullLargeFiles(ctx context.Context) {
	if p, ok := w.g.o.LFS.(puller); ok {
		if err := p.Pull(ctx); err != nil {
			w.g.log.Warn("large-file pull after rollback", zap.Error(err))
		}
	}
}

// Commit is a commit the engine just made: its sha, turn number and message.
type Commit struct {
	SHA     string
	Turn    int64
	Message string
}

// Remember journals a commit's checkpoint record (posted once persisted).
func (w *Writes) Remember(ctx context.Context, c Commit) {
	rec := w.g.checkpointRecord(ctx, c.SHA, c.Message, c.Turn)
	if err := w.g.o.Recorder.Remember(rec); err != nil {
		w.g.log.Warn("saving checkpoint journal", zap.String("sha", rec.CommitSHA), zap.Error(err))
	}
}

// RecordPending posts the persisted, unrecorded commits; a failure is
// retried by the background loop. A fenced pod posts none.
func (w *Writes) RecordPending(ctx context.Context) {
	if w.g.Fenced() {
		return
	}
	w.g.recordPending(ctx)
}

// FlushRecords posts the persisted, unrecorded commits once.
func (w *Writes) FlushRecords(ctx context.Context) error {
	if w.g.Fenced() {
		return w.fenced(nil)
	}
	return w.g.o.Recorder.Flush(ctx)
}

// PendingRecords reports whether the journal holds commits not persisted
// yet, and commits persisted but not recorded yet.
func (w *Writes) PendingRecords() (unpersisted, unrecorded bool) {
	for _, e := range w.g.o.Recorder.Pending() {
		unpersisted = unpersisted || !e.Persisted
		unrecorded = unrecorded || e.Persisted
	}
	return unpersisted, unrecorded
}

// MaybeRepack packs loose objects in the background (see maybeRepack).
func (w *Writes) MaybeRepack() { w.g.maybeRepack() }

// MarkDirty says HEAD holds commits not durable yet; MarkClean the opposite
// (s3, which has no durability step).
func (w *Writes) MarkDirty() { w.g.dirty.Store(true) }

// MarkClean: see MarkDirty.
func (w *Writes) MarkClean() { w.g.dirty.Store(false) }

// HasHead reports whether the repository has a commit.
func (w *Writes) HasHead(ctx context.Context) bool {
	head, _ := w.g.o.Repo.Head(ctx)
	return head != ""
}

// Log is the engine's logger.
func (w *Writes) Log() *zap.Logger { return w.g.log }

// checkpointRecord reads a commit's record for the journal (the fallback
// when git cannot be read keeps sha, message and time).
func (g *GitWorkspaceSync) checkpointRecord(ctx context.Context, sha, message string, turn int64) wire.CheckpointRecord {
	rec, err := g.o.Repo.Checkpoint(ctx, sha)
	if err != nil {
		g.log.Warn("reading commit metadata", zap.String("sha", sha), zap.Error(err))
		rec = wire.CheckpointRecord{CommitSHA: sha, CommitSummary: wire.CommitSummary{Message: message, Branch: Branch},
			CreatedAt: time.Now().UTC()}
	}
	rec.Turn = turn
	return rec
}
