package gitsync

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/wire"
)

// puller repopulates large files after the work tree was rewritten (git-lfs
// leaves pointer files when smudge is skipped).
type puller interface {
	Pull(ctx context.Context) error
}

// Restore is a rollback (docs/sync-modes.md §6): the index and work tree
// become those of commit sha, and the result is committed as a turn of the
// mode (persisted and recorded like any other). When the tree already is
// that commit's, no commit is made and the answer's SHA is empty.
func (g *GitWorkspaceSync) Restore(ctx context.Context, sha string) (wire.RestoreResponse, error) {
	g.engineMu.Lock()
	defer g.engineMu.Unlock()
	if g.closed {
		return wire.RestoreResponse{}, ErrClosed
	}
	if g.Fenced() {
		return wire.RestoreResponse{}, ErrFenced
	}
	resp := wire.RestoreResponse{RestoredFrom: sha}
	g.repoMu.Lock()
	err := g.o.Repo.ResetTreeTo(ctx, sha)
	g.repoMu.Unlock()
	if err != nil {
		return resp, err
	}
	g.strat.AfterRollback(ctx, g.w)
	short := sha
	if len(short) > 12 {
		short = short[:12]
	}
	newSHA, err := g.commitLocked(ctx, fmt.Sprintf("restore %s", short))
	if err != nil || newSHA == "" {
		return resp, err
	}
	g.afterCommit(ctx, newSHA)
	resp.SHA = newSHA
	g.log.Info("rolled back", zap.String("to", sha), zap.String("sha", newSHA))
	if g.Fenced() {
		return resp, ErrFenced
	}
	return resp, nil
}
