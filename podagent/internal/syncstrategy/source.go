package syncstrategy

import (
	"context"
	"errors"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/gitsync"
	"github.com/svc-dev/svc/podagent/internal/s3sync"
	"github.com/svc-dev/svc/podagent/internal/testhook"
)

// sourceWrites is the per-turn S3 write of s3 and dual_shadow, which S3
// reads and cold starts trust: large files as assets, then layer 1 and
// layer 2. A failed write is owed and retried by the engine's loop.
type sourceWrites struct {
	base
	s3    *s3sync.S3Sync
	large TurnLargeFiles
	owed  atomic.Bool
}

func newSourceWrites(b base, s Stores) sourceWrites {
	return sourceWrites{base: b, s3: s.S3, large: s.Large.Turn}
}

// committed is what a commit of these modes starts with.
func (w *sourceWrites) committed() { testhook.Reach(testhook.AfterCommit) }

// write is the S3 write; it remembers a failure as owed work.
func (w *sourceWrites) write(ctx context.Context) error {
	if w.fenced() {
		w.owed.Store(false)
		return w.fence()
	}
	if w.s3 == nil {
		return nil
	}
	err := w.lease.Check(ctx)
	if err == nil && w.large != nil {
		err = w.large.Push(ctx)
	}
	if err == nil || !errors.Is(err, gitsync.ErrFenced) {
		err = errors.Join(err, w.s3.AfterTurn(ctx))
	}
	if errors.Is(err, gitsync.ErrFenced) || w.fenced() {
		w.owed.Store(false)
		return w.fence()
	}
	w.owed.Store(err != nil)
	if err != nil {
		w.metrics.PersistFailures.Inc()
		w.log.Warn("S3 write of the turn failed; retrying in the background", zap.Error(err))
	}
	return err
}

// retry retries an owed S3 write; it reports whether none is owed.
func (w *sourceWrites) retry(ctx context.Context) bool {
	return !w.owed.Load() || w.write(ctx) == nil
}
