package syncstrategy

import (
	"context"

	"github.com/svc-dev/svc/podagent/internal/coldstart"
	"github.com/svc-dev/svc/podagent/internal/gitsync"
	"github.com/svc-dev/svc/podagent/internal/shutdown"
	"github.com/svc-dev/svc/shared/syncmode"
)

// s3Only is the legacy opt-out (docs/sync-modes.md §1): every turn writes
// layer 2, layer 1 and the assets; the local .git is not durable, there is
// no durability step (spec 3.2) and no checkpoint row.
type s3Only struct{ sourceModes }

func (s3Only) Mode() syncmode.Mode { return syncmode.S3 }

func (s3Only) Origin(Parts) *gitsync.Origin { return nil }

// Writer: s3 holds the S3 layers and the assets.
func (s3Only) Writer(s Stores) Writer {
	return &s3Writer{sourceWrites: newSourceWrites(newBase(syncmode.S3, s), s)}
}

// Shutdown: as dual_shadow, without a durability state to report (s3 has
// no durability step and no degrade machine).
func (s3Only) Shutdown(s *shutdown.Steps, p Started) {
	sourceModes{}.Shutdown(s, p)
	s.Healthy = nil
}

// s3Writer: the S3 write is the mode's only durable write; HEAD is as
// durable as it gets, so there is no durability step.
type s3Writer struct{ sourceWrites }

// Restore: from the S3 layers, without history (the seed is committed).
func (w *s3Writer) Restore(ctx context.Context, o coldstart.Options) (coldstart.Result, error) {
	return coldstart.FromS3(ctx, o, coldstart.NoHistory{})
}

func (w *s3Writer) Committed(ctx context.Context, _ gitsync.Commit) error {
	w.committed()
	_ = w.write(ctx)
	if w.fenced() {
		return w.fence()
	}
	return nil
}

// Flush: the S3 write, which fails the flush when it fails; the shutdown
// flush leaves it to the S3 flush step, a tag and the seed write nothing.
func (w *s3Writer) Flush(ctx context.Context, f gitsync.FlushEvent) error {
	if f.Commit != nil {
		w.committed()
	}
	switch f.Kind {
	case gitsync.FlushTagged, gitsync.FlushSeed:
		return nil
	case gitsync.FlushRequested:
		if err := w.write(ctx); err != nil {
			return err
		}
	}
	if w.fenced() {
		return w.fence()
	}
	w.ensureDeps(ctx, w.s3)
	return nil
}

func (w *s3Writer) RolledBack(context.Context) {}
func (w *s3Writer) Resume(context.Context)     {}
func (w *s3Writer) Owed() bool                 { return w.owed.Load() }
func (w *s3Writer) Retry(ctx context.Context) bool {
	return w.retry(ctx)
}
