package coldstart

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/gitsync"
)

// Assets is the large-file offload of s3 and dual_shadow (package assets).
type Assets interface {
	Restore(ctx context.Context) ([]string, error)
	TrackLarge(ctx context.Context) error
}

// ErrDiverged: the pod restarted on a disk whose history does not know the
// head S3's layer 2 records — another pod wrote the project meanwhile. The
// pod is fenced rather than overwrite that pod's turns with an older tree
// (docs/sync-modes.md §11).
var ErrDiverged = errors.New("coldstart: project-src.tar.gz records a head this disk's history does not know: another pod wrote the project since this disk's last turn")

// History is where FromS3 fetches the project's history from: the API
// origin (*gitsync.Origin, dual_shadow) or NoHistory (s3).
type History interface {
	// Fetch fetches the branch and tags into r; it reports whether there
	// was a branch.
	Fetch(ctx context.Context, r *gitsync.Repo) (bool, error)
}

// NoHistory is the history source of a mode that keeps none (s3): every
// cold start without a local .git commits the restored tree as the seed.
type NoHistory struct{}

// Fetch fetches nothing.
func (NoHistory) Fetch(context.Context, *gitsync.Repo) (bool, error) { return false, nil }

// FromS3 is the cold start from the S3 layers (spec 3.1 "cold-start
// source: S3", 10.1.6; docs/sync-modes.md §2), of s3 and dual_shadow:
//
//  1. .git already local: nothing to restore (a restarted pod);
//  2. else the work tree comes from S3: project-src.tar.gz, the assets,
//     layer 1; then a fresh repository fetches history: with history
//     there, the index is set to its HEAD and the work tree stays as S3
//     restored it (S3 is authoritative), unless S3's layer 2 is older than
//     that HEAD (a pod that ended without writing it), when the tree is
//     reset to HEAD; without history, the restored tree is committed as
//     the seed and made durable the mode's way (o.Sync: pushed in
//     dual_shadow, nothing more in s3).
func FromS3(ctx context.Context, o Options, h History) (Result, error) {
	start := time.Now()
	log := logger(o)
	res := Result{Phases: map[string]time.Duration{}}
	defer widenProcs()()
	o.Durable.Cleanup()
	err := fromS3(ctx, o, h, &res, log)
	res.Took = time.Since(start)
	if err == nil {
		log.Info("cold start done", zap.Bool("local", res.Local),
			zap.Bool("restored", res.Restored), zap.Bool("seeded", res.Seeded), zap.Bool("sourceRestored", res.SourceRestored),
			zap.Int("assets", len(res.Assets)), zap.String("head", res.Head), zap.Duration("took", res.Took))
	}
	return res, err
}

func fromS3(ctx context.Context, o Options, h History, res *Result, log *zap.Logger) error {
	if o.Durable.HasLocalRepo() {
		res.Local = true
		if err := o.Repo.Configure(ctx); err != nil {
			return err
		}
		if o.S3 != nil {
			// Layer 2 as this disk last wrote or restored it, or taken at a
			// commit this disk's history knows: nobody else wrote since.
			if h, etag, err := o.S3.ProjectArchiveInfo(ctx); err != nil {
				log.Warn("reading the head of project-src.tar.gz", zap.Error(err))
			} else if h != "" && etag != o.S3.SourceETag() && !o.Repo.Known(ctx, h) {
				return fmt.Errorf("%w (head %s)", ErrDiverged, h)
			}
			if _, err := o.S3.RestoreDeps(ctx); err != nil {
				log.Warn("deps layer restore failed", zap.Error(err))
			}
		}
		head, err := o.Repo.Head(ctx)
		res.Head = head
		return err
	}
	srcHead := ""
	if o.S3 != nil {
		found, h, err := o.S3.RestoreProjectArchive(ctx)
		if err != nil {
			return err
		}
		res.SourceRestored, srcHead = found, h
	}
	if o.Assets != nil {
		wrote, err := o.Assets.Restore(ctx)
		res.Assets = wrote
		if err != nil {
			return fmt.Errorf("coldstart: assets: %w", err)
		}
	}
	deps := startDeps(ctx, o, "")
	defer func() {
		if deps != nil {
			<-deps.done
			if deps.err != nil {
				log.Warn("deps layer restore failed", zap.Error(deps.err))
			}
			res.DepsRestored = deps.ok
		}
	}()
	if err := o.Repo.Init(ctx); err != nil {
		return err
	}
	if err := o.Repo.Configure(ctx); err != nil {
		return err
	}
	hasHistory, err := h.Fetch(ctx, o.Repo)
	if err != nil {
		return fmt.Errorf("coldstart: %w", err)
	}
	if hasHistory {
		head, err := o.Repo.Head(ctx)
		if err != nil {
			return err
		}
		older := srcHead != "" && srcHead != head && o.Repo.Known(ctx, srcHead) && o.Repo.IsAncestor(ctx, srcHead, head)
		if !res.SourceRestored || older {
			err = o.Repo.ResetHard(ctx)
		} else {
			err = o.Repo.ResetMixed(ctx)
		}
		if err != nil {
			return fmt.Errorf("coldstart: set the index to the origin's HEAD: %w", err)
		}
		res.Restored, res.Head = true, head
		return nil
	}
	if o.Assets != nil {
		if err := o.Assets.TrackLarge(ctx); err != nil {
			return err
		}
	}
	if err := o.Repo.StageAll(ctx); err != nil {
		return err
	}
	head, err := o.Repo.Commit(ctx, SeedMessage, true)
	if err != nil {
		return fmt.Errorf("coldstart: initial commit: %w", err)
	}
	res.Seeded, res.Head = true, head
	if err := o.Sync.PersistNow(ctx); err != nil {
		log.Warn("pushing the seeded repository failed", zap.Error(err))
	}
	return nil
}

// overlayNewerSource is git_only's guard for a project that comes from s3
// (or whose last turns were made in s3): when project-src.tar.gz records a
// head the restored history does not know, S3 holds turns the durable .git
// lacks, so the work tree becomes S3's (tracked files removed, layer 2
// extracted) and the next turn commits the difference. A head the history
// knows (the git_only shutdown snapshot, or older) changes nothing.
func overlayNewerSource(ctx context.Context, o Options, res *Result, log *zap.Logger) error {
	if o.S3 == nil {
		return nil
	}
	head, err := o.S3.ProjectArchiveHead(ctx)
	if err != nil {
		log.Warn("reading the head of project-src.tar.gz", zap.Error(err))
		return nil
	}
	if head == "" || o.Repo.Known(ctx, head) {
		return nil
	}
	tracked, err := o.Repo.Runner.Command("ls-files", "-z").Dir(o.Repo.Dir).String(ctx)
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(o.Repo.Dir)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, f := range strings.Split(tracked, "\x00") {
		if f != "" {
			_ = root.Remove(filepath.FromSlash(f))
		}
	}
	found, _, err := o.S3.RestoreProjectArchive(ctx)
	if err != nil {
		return err
	}
	res.SourceRestored = found
	log.Info("project-src.tar.gz is newer than the durable .git (turns made in s3): work tree taken from S3",
		zap.String("sourceHead", head))
	return nil
}
