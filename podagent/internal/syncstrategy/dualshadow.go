package syncstrategy

import (
	"context"
	"errors"

	"github.com/svc-dev/svc/podagent/internal/coldstart"
	"github.com/svc-dev/svc/podagent/internal/gitsync"
	"github.com/svc-dev/svc/shared/syncmode"
)

// dualShadow writes what s3 writes and pushes each turn to the API origin,
// whose post-receive makes it durable and writes the rows
// (docs/sync-modes.md §2). The push is the durability step.
type dualShadow struct{ sourceModes }

func (dualShadow) Mode() syncmode.Mode { return syncmode.DualShadow }

func (dualShadow) Restore(ctx context.Context, o coldstart.Options) (coldstart.Result, error) {
	o.Mode = syncmode.DualShadow
	return coldstart.Run(ctx, o)
}

func (dualShadow) Origin(p Parts) *gitsync.Origin {
	return &gitsync.Origin{APIURL: p.Config.APIURL, ProjectID: p.Config.ProjectID, Token: p.Config.RuntimeToken, Epoch: p.Lease.Epoch}
}

func (dualShadow) Durability(ctx context.Context, w *gitsync.Writes) (bool, error) {
	return true, w.PushOrigin(ctx)
}

// FlushWrites: the S3 write; only fencing fails the flush (the push is
// what makes it durable).
func (dualShadow) FlushWrites(ctx context.Context, w *gitsync.Writes, skipSource bool) error {
	if skipSource {
		return nil
	}
	if err := w.WriteSource(ctx); errors.Is(err, gitsync.ErrFenced) {
		return err
	}
	return nil
}

// Resume: a restarted pod may hold commits the origin lacks: push (a no-op
// when it is up to date).
func (dualShadow) Resume(ctx context.Context, w *gitsync.Writes) {
	if w.HasHead(ctx) {
		w.MarkDirty()
		_ = w.Step(ctx)
	}
}
