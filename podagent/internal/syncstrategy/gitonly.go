package syncstrategy

import (
	"context"

	"github.com/svc-dev/svc/podagent/internal/assets"

	"github.com/svc-dev/svc/podagent/internal/coldstart"
	"github.com/svc-dev/svc/podagent/internal/gitsync"
	"github.com/svc-dev/svc/podagent/internal/lfs"
	"github.com/svc-dev/svc/podagent/internal/s3sync"
	"github.com/svc-dev/svc/podagent/internal/shutdown"
	"github.com/svc-dev/svc/shared/syncmode"
)

// gitOnly is the default (docs/sync-modes.md §1): each turn pushes its
// large files through git-lfs, persists .git to <projectId>/repo.git.tar.gz
// (the durability step) and records the checkpoint; layer 2 is suppressed
// while healthy, and the healthy shutdown writes the HEAD snapshot instead.
type gitOnly struct{}

func (gitOnly) Mode() syncmode.Mode { return syncmode.GitOnly }

func (gitOnly) Restore(ctx context.Context, o coldstart.Options) (coldstart.Result, error) {
	o.Mode = syncmode.GitOnly
	return coldstart.Run(ctx, o)
}

func (gitOnly) Source(o *s3sync.Options, _ *assets.Assets) { o.SuppressProjectArchive = true }

// SuppressSource: a degraded git_only pod writes layer 2 again (spec 3.2).
func (gitOnly) SuppressSource(s *s3sync.S3Sync) func(bool) { return s.SetSuppressProjectArchive }

func (gitOnly) LargeFiles(p Parts) LargeFiles {
	cfg := p.Config
	switch {
	case !cfg.LFS:
		return LargeFiles{}
	case cfg.APIURL == "":
		p.Log.Warn("SVC_LFS=true but SVC_API_URL is empty: large files are committed as ordinary blobs")
		return LargeFiles{}
	}
	large := lfs.New(lfs.Options{Dir: p.Workspace, Runner: p.Runner, APIURL: cfg.APIURL, ProjectID: cfg.ProjectID,
		Token: cfg.RuntimeToken, Threshold: cfg.LargeFileBytes, Log: p.Log})
	return LargeFiles{Turn: large, Cold: large}
}

func (gitOnly) Origin(Parts) *gitsync.Origin { return nil }

func (gitOnly) AfterStart(ctx context.Context, p Started) {
	if !p.Sync.Fenced() {
		migrateLegacyAssets(ctx, p)
	}
}

func (gitOnly) Shutdown(s *shutdown.Steps, p Started) {
	s.Healthy = p.Sync.Healthy
	s.ForceProjectArchive = true
}

// Committed journals the commit's checkpoint record; it is posted once a
// persist made the commit durable.
func (gitOnly) Committed(ctx context.Context, w *gitsync.Writes, c gitsync.Commit) {
	w.Remember(ctx, c)
}

// AfterCommit: push large files, persist .git, then record; then layer 1
// (layer 2 only when not suppressed).
func (gitOnly) AfterCommit(ctx context.Context, w *gitsync.Writes) {
	w.PushLargeFiles(ctx)
	if err := w.Step(ctx); err == nil {
		w.RecordPending(ctx)
		w.MaybeRepack()
	}
	w.UpdateLayers(ctx)
}

func (gitOnly) Durability(ctx context.Context, w *gitsync.Writes) (bool, error) {
	return true, w.PersistGit(ctx)
}

func (gitOnly) FlushWrites(ctx context.Context, w *gitsync.Writes, _ bool) error {
	w.PushLargeFiles(ctx)
	return nil
}

func (gitOnly) AfterFlush(ctx context.Context, w *gitsync.Writes) { w.RecordPending(ctx) }

// Resume: if the journal holds commits the durable object may lack,
// persist now; then record what is persisted.
func (gitOnly) Resume(ctx context.Context, w *gitsync.Writes) {
	if unpersisted, _ := w.PendingRecords(); unpersisted {
		w.MarkDirty()
		w.Log().Info("resuming: persisting commits made before a restart")
		w.PushLargeFiles(ctx)
		if err := w.Step(ctx); err != nil {
			return
		}
	}
	w.RecordPending(ctx)
}

func (gitOnly) Owed(w *gitsync.Writes) bool {
	_, unrecorded := w.PendingRecords()
	return unrecorded
}

func (gitOnly) Retry(ctx context.Context, w *gitsync.Writes) bool { return w.FlushRecords(ctx) == nil }

func (gitOnly) AfterRollback(ctx context.Context, w *gitsync.Writes) { w.PullLargeFiles(ctx) }
