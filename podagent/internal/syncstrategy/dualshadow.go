package syncstrategy

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/coldstart"
	"github.com/svc-dev/svc/podagent/internal/gitsync"
	"github.com/svc-dev/svc/podagent/internal/testhook"
	"github.com/svc-dev/svc/shared/syncmode"
)

// dualShadow writes what s3 writes and pushes each turn to the API origin,
// whose post-receive makes it durable and writes the rows
// (docs/sync-modes.md §2). The push is the durability step.
type dualShadow struct{ sourceModes }

func (dualShadow) Mode() syncmode.Mode { return syncmode.DualShadow }

func (dualShadow) Origin(p Parts) *gitsync.Origin {
	return &gitsync.Origin{APIURL: p.Config.APIURL, ProjectID: p.Config.ProjectID, Token: p.Config.RuntimeToken, Epoch: p.Lease.Epoch}
}

// Writer: dual_shadow holds the S3 layers, the assets and the origin push.
func (dualShadow) Writer(s Stores) Writer {
	return &dualShadowWriter{sourceWrites: newSourceWrites(newBase(syncmode.DualShadow, s), s), repo: s.Repo, origin: s.Origin}
}

type dualShadowWriter struct {
	sourceWrites
	repo   *gitsync.Repo
	origin *gitsync.Origin

	pushMu sync.Mutex  // orders pushes
	dirty  atomic.Bool // HEAD has commits the origin lacks
}

// Restore: from the S3 layers, with the history fetched from the origin
// (the seed is pushed there when it has none).
func (w *dualShadowWriter) Restore(ctx context.Context, o coldstart.Options) (coldstart.Result, error) {
	return coldstart.FromS3(ctx, o, w.origin)
}

// Committed: S3 (layers + assets) first, it is what reads and cold starts
// trust; then the push.
func (w *dualShadowWriter) Committed(ctx context.Context, _ gitsync.Commit) error {
	w.committed()
	w.dirty.Store(true)
	_ = w.write(ctx)
	return w.stepFenced(ctx)
}

// stepFenced is the durability step whose only failure a turn reports is
// fencing (a transient one is owed and degrades).
func (w *dualShadowWriter) stepFenced(ctx context.Context) error {
	if err := w.step(ctx, w.push); errors.Is(err, gitsync.ErrFenced) {
		return err
	}
	return nil
}

// Flush: the S3 write (only fencing fails the flush: the push is what
// makes it durable; the shutdown flush leaves layer 2 to the S3 flush),
// then the push. The seed pushes its large files first.
func (w *dualShadowWriter) Flush(ctx context.Context, f gitsync.FlushEvent) error {
	if f.Commit != nil {
		w.committed()
		w.dirty.Store(true)
	}
	switch f.Kind {
	case gitsync.FlushTagged:
		w.dirty.Store(true)
		return w.step(ctx, w.push)
	case gitsync.FlushSeed:
		w.dirty.Store(true)
		if w.large != nil && !w.fenced() {
			if err := w.large.Push(ctx); err != nil {
				w.log.Warn("large-file push of the seed failed", zap.Error(err))
			}
		}
		return w.step(ctx, w.push)
	case gitsync.FlushRequested:
		if err := w.write(ctx); errors.Is(err, gitsync.ErrFenced) {
			return err
		}
	}
	if err := w.step(ctx, w.push); err != nil {
		return err
	}
	w.ensureDeps(ctx, w.s3)
	return nil
}

// Resume: a restarted pod may hold commits the origin lacks: push (a no-op
// when it is up to date).
func (w *dualShadowWriter) Resume(ctx context.Context) {
	if head, _ := w.repo.Head(ctx); head != "" {
		w.dirty.Store(true)
		_ = w.step(ctx, w.push)
	}
}

func (w *dualShadowWriter) RolledBack(context.Context) {}

// Owed: an S3 write or a push.
func (w *dualShadowWriter) Owed() bool { return w.owed.Load() || w.dirty.Load() }

func (w *dualShadowWriter) Retry(ctx context.Context) bool {
	if !w.retry(ctx) {
		return false
	}
	return !w.dirty.Load() || w.step(ctx, w.push) == nil
}

// push is the durability step of dual_shadow: push the branch and tags to
// the API origin, which makes them durable and writes the rows. It is
// fenced like every write: the ownership record is checked before and
// after, and the API refuses (409) the push of a pod whose epoch is not
// the record's.
func (w *dualShadowWriter) push(ctx context.Context) error {
	w.pushMu.Lock()
	defer w.pushMu.Unlock()
	if w.origin == nil {
		return errors.New("gitsync: dual_shadow without an origin (SVC_API_URL)")
	}
	if err := w.lease.Check(ctx); err != nil {
		return err
	}
	testhook.Reach(testhook.BeforePush)
	start := time.Now()
	err := w.upload(ctx, "push", func(ctx context.Context) error {
		err := w.origin.Push(ctx, w.repo)
		if errors.Is(err, gitsync.ErrOriginFenced) {
			return w.lease.Fence(err.Error())
		}
		return err
	})
	w.metrics.PersistDuration.Observe(time.Since(start).Seconds())
	if err != nil && !errors.Is(err, gitsync.ErrFenced) {
		// Tell "someone else owns the project" from a transient failure.
		if cerr := w.lease.Check(ctx); errors.Is(cerr, gitsync.ErrFenced) {
			return cerr
		}
	}
	if err == nil {
		err = w.lease.Check(ctx)
	}
	if err != nil {
		return err
	}
	w.dirty.Store(false)
	w.log.Info("pushed to origin", zap.String("origin", w.origin.URL()), zap.Duration("took", time.Since(start)))
	testhook.Reach(testhook.AfterPersist)
	return nil
}
