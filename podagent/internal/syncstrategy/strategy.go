// Package syncstrategy holds the pod's one implementation per sync mode
// (spec 3.1, 3.2, 10.1–10.3; docs/sync-modes.md §12): git_only, s3 and
// dual_shadow, each a Strategy chosen once at pod start by For from the mode
// table. A Strategy says what a turn does after its commit (persist, push,
// record), how the pod restores (cold-start source, origin), where large
// files go (git-lfs or assets) and what the shutdown writes. This package
// and shared/syncmode are the only places that tell the modes apart
// (TestNoModeBranchOutsideStrategies). Each mode's Writer owns its mode's
// durable writes — git_only the .git persister and the checkpoint records,
// dual_shadow the origin push, s3 and dual_shadow the S3 layers and the
// assets — and their retry; every store it writes fences through the pod's
// ownership lease (docs/sync-modes.md §11).
package syncstrategy

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/assets"
	"github.com/svc-dev/svc/podagent/internal/coldstart"
	"github.com/svc-dev/svc/podagent/internal/config"
	"github.com/svc-dev/svc/podagent/internal/degrade"
	"github.com/svc-dev/svc/podagent/internal/gitsync"
	"github.com/svc-dev/svc/podagent/internal/ownership"
	"github.com/svc-dev/svc/podagent/internal/s3sync"
	"github.com/svc-dev/svc/podagent/internal/shutdown"
	"github.com/svc-dev/svc/shared/gitrun"
	"github.com/svc-dev/svc/shared/syncmode"
)

// Strategy is one sync mode: its Writer (what the turn engine's events
// write, and the cold start from those stores) and the pod's wiring of the
// mode.
type Strategy interface {
	// Mode names the mode.
	Mode() syncmode.Mode
	// Writer builds the mode's writes over the pod's stores.
	Writer(s Stores) Writer
	// Source configures layer 2's writer: suppressed in git_only (the
	// durable .git holds the files), offloaded large files left out in s3
	// and dual_shadow.
	Source(o *s3sync.Options, a *assets.Assets)
	// SuppressSource is the degrade machine's suppression callback (spec
	// 3.2; nil: degrading changes no write).
	SuppressSource(s *s3sync.S3Sync) func(bool)
	// LargeFiles picks where large files go (spec 10.3): git-lfs in
	// git_only, assets in s3 and dual_shadow.
	LargeFiles(p Parts) LargeFiles
	// Origin is the API origin the pod pushes to and restores from
	// (dual_shadow); nil: none.
	Origin(p Parts) *gitsync.Origin
	// AfterStart runs once after cold start and Resume (git_only migrates
	// an earlier life's assets to git-lfs).
	AfterStart(ctx context.Context, p Started)
	// Shutdown sets the mode's part of the spec 10.2 sequence.
	Shutdown(s *shutdown.Steps, p Started)
}

// Parts are what the pod has built before it wires the mode.
type Parts struct {
	Config    *config.Config
	Workspace string
	Runner    *gitrun.Runner
	Assets    *assets.Assets
	Lease     *ownership.Lease
	Log       *zap.Logger
}

// TurnLargeFiles are a mode's large files around a commit: tracked before
// it (the engine), uploaded after it (the mode's Writer).
type TurnLargeFiles interface {
	gitsync.LargeFiles
	// Push uploads the large-file bytes not yet stored; nil means every
	// object is stored (git_only's .git archive then omits the cache).
	Push(ctx context.Context) error
}

// LargeFiles is where a mode's large files go, for turns and cold start.
type LargeFiles struct {
	Turn   TurnLargeFiles
	Cold   coldstart.LargeFiles
	Assets coldstart.Assets
}

// Started is the running pod, as the strategy sees it after cold start.
type Started struct {
	Sync    *gitsync.GitWorkspaceSync
	Machine *degrade.Machine
	Repo    *gitsync.Repo
	Assets  *assets.Assets
	S3      *s3sync.S3Sync
	Log     *zap.Logger
}

// table is the one place a mode picks its implementation.
var table = map[syncmode.Mode]func() Strategy{
	syncmode.GitOnly:    func() Strategy { return gitOnly{} },
	syncmode.S3:         func() Strategy { return s3Only{} },
	syncmode.DualShadow: func() Strategy { return dualShadow{} },
}

// For returns the strategy of mode m (empty: syncmode.Default). An unknown
// mode is an error naming the valid ones.
func For(m syncmode.Mode) (Strategy, error) {
	if m == "" {
		m = syncmode.Default
	}
	mk, ok := table[m]
	if !ok {
		_, err := syncmode.Parse(string(m))
		if err == nil {
			err = fmt.Errorf("syncstrategy: no strategy for mode %q", m)
		}
		return nil, err
	}
	return mk(), nil
}

// sourceModes is what s3 and dual_shadow share: S3 is authoritative, large
// files are assets, layer 2 is never suppressed, and the shutdown ends with
// the S3 flush (the HEAD snapshot is git_only's alone).
type sourceModes struct{}

func (sourceModes) Source(o *s3sync.Options, a *assets.Assets) { o.Exclude = a.IsOffloaded }

func (sourceModes) SuppressSource(*s3sync.S3Sync) func(bool) { return nil }

func (sourceModes) LargeFiles(p Parts) LargeFiles {
	return LargeFiles{Turn: p.Assets, Assets: p.Assets}
}

func (sourceModes) AfterStart(context.Context, Started) {}

func (sourceModes) Shutdown(s *shutdown.Steps, p Started) {
	s.UploadHEADSnapshot = nil // git_only's alone: these modes end with the S3 flush
	flush := s.S3Flush
	s.S3Flush = func(ctx context.Context, force bool) error {
		// Large files are uploaded at shutdown too (spec 2.7).
		return errors.Join(p.Assets.Push(ctx), flush(ctx, force))
	}
	s.ForceProjectArchive = false
}
