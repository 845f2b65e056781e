// Package coldstart brings a pod's workspace up in git_only (spec 10.1.5,
// 10.1.7):
//
//  1. .git already local: restore does nothing; the fencing token is
//     re-established (durable.Adopt).
//  2. else, a durable object exists: restore .git from it, reset the work
//     tree to HEAD keeping untracked and ignored files, then
//     git fsck --connectivity-only must pass.
//  3. else: git init, an initial commit of the on-disk tree, persist it.
//
// Then large files are pulled and the deps layer (layer 1) is restored.
package coldstart

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/durable"
	"github.com/svc-dev/svc/podagent/internal/gitsync"
	"github.com/svc-dev/svc/podagent/internal/s3sync"
	"github.com/svc-dev/svc/shared/archive"
)

// SeedMessage is the message of the initial commit.
const SeedMessage = "initial commit"

// Persister is the durability step used to persist the seed.
type Persister interface {
	PersistNow(ctx context.Context) error
}

// LargeFilePuller repopulates large files after restore (spec 10.3).
type LargeFilePuller interface {
	Pull(ctx context.Context) error
}

// Options are the parts cold start uses.
type Options struct {
	Repo    *gitsync.Repo
	Durable *durable.Persister
	Sync    Persister
	S3      *s3sync.S3Sync  // nil skips layer 1
	LFS     LargeFilePuller // nil skips the pull
	// Setup, when set, runs after the repository exists and is configured
	// (the large-file attributes and filter config).
	Setup  func(ctx context.Context) error
	Limits archive.ExtractOptions
	Log    *zap.Logger
}

// Result says what cold start did.
type Result struct {
	Local, Restored, Seeded bool
	DepsRestored            bool
	Head                    string
	Took                    time.Duration
	// Phases is where the time went (restore, reset, fsck, lfs, deps).
	Phases map[string]time.Duration
}

// Run performs the cold start.
func Run(ctx context.Context, o Options) (Result, error) {
	start := time.Now()
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	log = log.Named("coldstart")
	res := Result{Phases: map[string]time.Duration{}}
	mark := time.Now()
	phase := func(name string) {
		now := time.Now()
		res.Phases[name] += now.Sub(mark)
		mark = now
	}
	o.Durable.Cleanup()

	switch {
	case o.Durable.HasLocalRepo():
		res.Local = true
		if err := o.Repo.Configure(ctx); err != nil {
			return res, err
		}
		if err := o.Durable.Adopt(ctx); err != nil {
			return res, err
		}
	default:
		restored, err := o.Durable.Restore(ctx, o.Limits)
		phase("restore")
		if err != nil {
			return res, err
		}
		if restored {
			res.Restored = true
			if err := o.Repo.Configure(ctx); err != nil {
				return res, err
			}
			head, err := o.Repo.Head(ctx)
			if err != nil {
				return res, err
			}
			if head != "" {
				if err := o.Repo.ResetHard(ctx); err != nil {
					return res, fmt.Errorf("coldstart: reset to HEAD: %w", err)
				}
			}
			phase("reset")
			if err := o.Repo.FsckConnectivity(ctx); err != nil {
				return res, fmt.Errorf("coldstart: restored repository fails fsck: %w", err)
			}
			phase("fsck")
			break
		}
		res.Seeded = true
		if err := o.Repo.Init(ctx); err != nil {
			return res, err
		}
		if err := o.Repo.Configure(ctx); err != nil {
			return res, err
		}
		if o.Setup != nil {
			if err := o.Setup(ctx); err != nil {
				return res, err
			}
		}
		if err := o.Repo.StageAll(ctx); err != nil {
			return res, err
		}
		if _, err := o.Repo.Commit(ctx, SeedMessage, true); err != nil {
			return res, fmt.Errorf("coldstart: initial commit: %w", err)
		}
		if err := o.Sync.PersistNow(ctx); err != nil {
			// The seed is local; the degrade machine counted the failure
			// and the next turn persists it.
			log.Warn("persisting the seeded repository failed", zap.Error(err))
		}
	}
	if o.Setup != nil && !res.Seeded {
		if err := o.Setup(ctx); err != nil {
			return res, err
		}
	}
	if o.LFS != nil {
		if err := o.LFS.Pull(ctx); err != nil {
			log.Warn("large-file pull failed", zap.Error(err))
		}
	}
	phase("lfs")
	if o.S3 != nil {
		ok, err := o.S3.RestoreDeps(ctx)
		phase("deps")
		if err != nil {
			log.Warn("deps layer restore failed", zap.Error(err))
		}
		res.DepsRestored = ok
	}
	head, err := o.Repo.Head(ctx)
	if err != nil {
		return res, err
	}
	res.Head = head
	res.Took = time.Since(start)
	log.Info("cold start done", zap.Bool("local", res.Local), zap.Bool("restored", res.Restored),
		zap.Bool("seeded", res.Seeded), zap.Bool("depsRestored", res.DepsRestored), zap.String("head", head), zap.Duration("took", res.Took), zap.Any("phases", res.Phases))
	return res, nil
}
