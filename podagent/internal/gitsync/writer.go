package gitsync

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/wire"
)

// Writer is what one sync mode writes (docs/sync-modes.md §12): package
// syncstrategy holds its three implementations, each owning its stores (the
// durable .git persister, the origin push, the S3 layers and assets), its
// owed-work flags and their retry. The engine calls it once per event,
// under the turn lock; every store it writes fences through the pod's
// ownership lease (docs/sync-modes.md §11).
type Writer interface {
	// Committed is a turn's (or a rollback's) commit: the mode journals
	// its checkpoint record and makes the commit as durable as the mode
	// makes turns. A failed write is owed work, not an error; ErrFenced
	// reports that another pod owns the project.
	Committed(ctx context.Context, c Commit) error
	// Flush makes what HEAD (and its tags) holds durable (see FlushEvent);
	// an error fails the flush (ErrNotPersisted, or ErrFenced).
	Flush(ctx context.Context, f FlushEvent) error
	// RolledBack runs after a rollback rewrote the work tree, before its
	// commit (git-lfs pulls the real bytes back).
	RolledBack(ctx context.Context)
	// Resume finishes, once at start, what a crash interrupted.
	Resume(ctx context.Context)
	// Owed reports work a failed write left (the engine's retry loop
	// then calls Retry with backoff).
	Owed() bool
	// Retry makes one attempt at the owed work; it reports whether none is
	// left.
	Retry(ctx context.Context) (done bool)
}

// Commit is a commit the engine just made: its sha, turn number and message.
type Commit struct {
	SHA     string
	Turn    int64
	Message string
}

// FlushKind says why a flush runs.
type FlushKind int

const (
	// FlushRequested is POST /agent/git-flush (and the first step of a
	// publish): pending changes were committed as Commit.
	FlushRequested FlushKind = iota
	// FlushTagged follows a publish's tag: only the tag is new.
	FlushTagged
	// FlushShutdown is the shutdown flush (spec 10.2.2): layer 2 is left to
	// the S3 flush step that follows.
	FlushShutdown
	// FlushSeed persists the cold-start seed commit.
	FlushSeed
)

// FlushEvent is one flush: why, and the commit it made (nil: nothing was
// pending).
type FlushEvent struct {
	Kind   FlushKind
	Commit *Commit
}

// CheckpointRecord is the checkpoint record of commit c as the journal
// keeps it (read from git; the fallback when git cannot be read keeps sha,
// message and time).
func (r *Repo) CheckpointRecord(ctx context.Context, c Commit, log *zap.Logger) wire.CheckpointRecord {
	rec, err := r.Checkpoint(ctx, c.SHA)
	if err != nil {
		log.Warn("reading commit metadata", zap.String("sha", c.SHA), zap.Error(err))
		rec = wire.CheckpointRecord{CommitSHA: c.SHA, CommitSummary: wire.CommitSummary{Message: c.Message, Branch: Branch},
			CreatedAt: time.Now().UTC()}
	}
	rec.Turn = c.Turn
	return rec
}
