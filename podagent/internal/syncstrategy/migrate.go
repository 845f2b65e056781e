package syncstrategy

import (
	"context"
	"strings"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/gitsync"
)

// MigrationMessage is the commit message of the lazy legacy-asset migration.
const MigrationMessage = "migrate offloaded large files to git-lfs"

// migrateLegacyAssets is spec 10.3's lazy migration, on pod start in
// git_only: large files an earlier s3 or dual_shadow life offloaded to
// <projectId>/assets/ are brought into the work tree, the managed exclude
// block is dropped, and one flush commits them (git-lfs tracks them, the
// bytes go to the batch endpoint) and persists. Each asset key whose file
// is then in HEAD is deleted. A failure leaves the keys for the next start.
func migrateLegacyAssets(ctx context.Context, p Started) {
	keys, err := p.Assets.Keys(ctx)
	if err != nil {
		p.Log.Warn("listing legacy assets", zap.Error(err))
		return
	}
	if len(keys) == 0 {
		_ = p.Assets.ClearExclude()
		return
	}
	if _, err := p.Assets.Restore(ctx); err != nil {
		p.Log.Warn("downloading legacy assets", zap.Error(err))
		return
	}
	if err := p.Assets.ClearExclude(); err != nil {
		p.Log.Warn("clearing the asset exclude block", zap.Error(err))
		return
	}
	if _, err := p.Sync.Flush(ctx, gitsync.FlushOptions{Message: MigrationMessage}); err != nil {
		p.Log.Warn("legacy asset migration not persisted yet; it is retried at the next start", zap.Error(err))
		return
	}
	out, err := p.Repo.Runner.Command("ls-files", "-z").Dir(p.Repo.Dir).String(ctx)
	if err != nil {
		return
	}
	tracked := map[string]bool{}
	for _, f := range strings.Split(out, "\x00") {
		tracked[f] = true
	}
	for _, rel := range keys {
		if tracked[rel] {
			if err := p.Assets.Delete(ctx, rel); err != nil {
				p.Log.Warn("deleting a migrated asset", zap.String("path", rel), zap.Error(err))
			}
		}
	}
}
