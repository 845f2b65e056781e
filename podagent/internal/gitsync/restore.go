package gitsync

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/wire"
)

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
	g.o.Repo.Lock()
	err := g.o.Repo.ResetTreeTo(ctx, sha)
	g.o.Repo.Unlock()
	if err != nil {
		return resp, err
	}
	g.w.RolledBack(ctx)
	short := sha
	if len(short) > 12 {
		short = short[:12]
	}
	newSHA, err := g.turnLocked(ctx, fmt.Sprintf("restore %s", short))
	resp.SHA = newSHA
	if newSHA != "" {
		g.log.Info("rolled back", zap.String("to", sha), zap.String("sha", newSHA))
	}
	return resp, err
}
