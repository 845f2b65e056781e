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

func (s3Only) Restore(ctx context.Context, o coldstart.Options) (coldstart.Result, error) {
	o.Mode = syncmode.S3
	return coldstart.Run(ctx, o)
}

func (s3Only) Origin(Parts) *gitsync.Origin { return nil }

// Durability: none in s3; HEAD is as durable as it gets.
func (s3Only) Durability(_ context.Context, w *gitsync.Writes) (bool, error) {
	w.MarkClean()
	return false, nil
}

// FlushWrites: the S3 write is s3's only durable write, so a flush fails
// when it does.
func (s3Only) FlushWrites(ctx context.Context, w *gitsync.Writes, skipSource bool) error {
	if skipSource {
		return nil
	}
	return w.WriteSource(ctx)
}

func (s3Only) Resume(context.Context, *gitsync.Writes) {}

// Shutdown: as dual_shadow, without a durability state to report (s3 has
// no durability step and no degrade machine).
func (s3Only) Shutdown(s *shutdown.Steps, p Started) {
	sourceModes{}.Shutdown(s, p)
	s.Healthy = nil
}
