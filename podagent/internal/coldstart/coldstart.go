// Package coldstart brings a pod's workspace up (spec 10.1.5–10.1.7). The
// mode's strategy (package syncstrategy) picks the source: FromGit, the
// durable .git of git_only, below; FromS3, the S3 layers and a history
// source of s3 and dual_shadow (fromsource.go). Neither knows the mode.
//
// FromGit:
//
//  1. .git already local: restore does nothing; the fencing token is
//     re-established (durable.Adopt).
//  2. else, a durable object exists: restore .git from it, reset the work
//     tree to HEAD keeping untracked and ignored files, then
//     git fsck --connectivity-only must pass.
//  3. else: git init, an initial commit of the on-disk tree, persist it.
//
// Then large files are pulled (spec 10.3). The deps layer (layer 1) is
// restored concurrently from the first moment: the durable object
// carries the deps key of its HEAD in a manifest, its first entry, so the
// deps download starts as soon as the .git download begins and the two
// extract side by side. An object written before manifests existed falls
// back to the key of HEAD's lockfile read from the object database, before
// the work-tree reset.
package coldstart

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/durable"
	"github.com/svc-dev/svc/podagent/internal/gitsync"
	"github.com/svc-dev/svc/podagent/internal/s3sync"
	"github.com/svc-dev/svc/shared/archive"
	"github.com/svc-dev/svc/shared/repoarchive"
)

// SeedMessage is the message of the initial commit.
const SeedMessage = "initial commit"

// Persister makes the seed commit durable the mode's way (the engine's
// PersistNow: in git_only the .git persist, in dual_shadow the push).
type Persister interface {
	PersistNow(ctx context.Context) error
}

// LargeFiles repopulates large files after restore and tracks them in the
// seed commit (spec 10.3).
type LargeFiles interface {
	Setup(ctx context.Context) error
	TrackLarge(ctx context.Context) error
	Pull(ctx context.Context) error
}

// Options are the parts cold start uses.
type Options struct {
	Assets  Assets // FromS3's large files; nil: none
	Repo    *gitsync.Repo
	Durable *durable.Persister
	Sync    Persister
	S3      *s3sync.S3Sync // nil skips layer 1
	LFS     LargeFiles     // nil: no large-file handling
	Limits  archive.ExtractOptions
	Log     *zap.Logger
}

// Result says what cold start did.
type Result struct {
	Local, Restored, Seeded bool
	// SourceRestored: the work tree came from project-src.tar.gz; Assets
	// lists the large files downloaded from <projectId>/assets/.
	SourceRestored bool
	Assets         []string
	DepsRestored   bool
	Head           string
	Took           time.Duration
	// Phases is where the time went: restore, reset, fsck, lfs on the main
	// path; deps runs concurrently with reset..lfs and is its own duration;
	// depsWait is how long the main path waited for it at the end.
	Phases map[string]time.Duration
}

// FromGit is the cold start from the durable .git (git_only).
func FromGit(ctx context.Context, o Options) (Result, error) {
	start := time.Now()
	log := logger(o)
	res := Result{Phases: map[string]time.Duration{}}
	mark := time.Now()
	phase := func(name string) {
		now := time.Now()
		res.Phases[name] += now.Sub(mark)
		mark = now
	}
	defer widenProcs()()
	o.Durable.Cleanup()
	// deps runs layer 1 concurrently with the rest of the cold start.
	var deps *depsJob
	defer func() {
		if deps != nil {
			deps.cancel()
			<-deps.done
		}
	}()

	switch {
	case o.Durable.HasLocalRepo():
		res.Local = true
		if err := o.Repo.Configure(ctx); err != nil {
			return res, err
		}
		deps = startDeps(ctx, o, "")
		if err := o.Durable.Adopt(ctx); errors.Is(err, durable.ErrAdoptPending) {
			// Object storage is down: serve turns from the local .git; the
			// persists fail and degrade (spec 3.2) until it is back.
			log.Warn("starting on the local .git while object storage is unavailable", zap.Error(err))
		} else if err != nil {
			return res, err
		}
		phase("adopt")
	default:
		manifest := false
		restored, err := o.Durable.RestoreWith(ctx, o.Limits, func(m repoarchive.Manifest) {
			manifest = true
			if m.DepsHash != "" && deps == nil {
				deps = startDeps(ctx, o, m.DepsHash)
			}
		})
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
				// Without a manifest the deps layer's key is HEAD's
				// lockfile: read it from the object database and start the
				// download now, while the work tree is being reset.
				if deps == nil && !manifest {
					if hash, err := o.Repo.LockfileHash(ctx); err != nil {
						log.Warn("reading the lockfile of HEAD", zap.Error(err))
					} else if hash != "" {
						deps = startDeps(ctx, o, hash)
					}
				}
				if err := o.Repo.ResetHard(ctx); err != nil {
					return res, fmt.Errorf("coldstart: reset to HEAD: %w", err)
				}
			}
			if deps == nil {
				deps = startDeps(ctx, o, "") // from the lockfile on disk, now that the tree is reset
			}
			phase("reset")
			if err := o.Repo.FsckConnectivity(ctx); err != nil {
				return res, fmt.Errorf("coldstart: restored repository fails fsck: %w", err)
			}
			phase("fsck")
			if err := overlayNewerSource(ctx, o, &res, log); err != nil {
				return res, err
			}
			break
		}
		res.Seeded = true
		// No durable .git: seed from the S3 layers when they exist (a
		// project that was in s3 mode), else from what is on disk.
		if o.S3 != nil {
			found, _, err := o.S3.RestoreProjectArchive(ctx)
			if err != nil {
				return res, err
			}
			res.SourceRestored = found
		}
		deps = startDeps(ctx, o, "")
		if err := o.Repo.Init(ctx); err != nil {
			return res, err
		}
		if err := o.Repo.Configure(ctx); err != nil {
			return res, err
		}
		if o.LFS != nil {
			if err := o.LFS.Setup(ctx); err != nil {
				return res, err
			}
			if err := o.LFS.TrackLarge(ctx); err != nil {
				log.Warn("tracking large files of the seed", zap.Error(err))
			}
		}
		if err := o.Repo.StageAll(ctx); err != nil {
			return res, err
		}
		if _, err := o.Repo.Commit(ctx, SeedMessage, true); err != nil {
			return res, fmt.Errorf("coldstart: initial commit: %w", err)
		}
		phase("seed")
		if err := o.Sync.PersistNow(ctx); err != nil {
			// The seed is local; the degrade machine counted the failure
			// and the next turn persists it.
			log.Warn("persisting the seeded repository failed", zap.Error(err))
		}
		phase("persist")
	}
	if o.LFS != nil {
		if !res.Seeded {
			if err := o.LFS.Setup(ctx); err != nil {
				return res, err
			}
			if err := o.LFS.Pull(ctx); err != nil {
				log.Warn("large-file pull failed", zap.Error(err))
			}
		}
		phase("lfs")
	}
	if deps != nil {
		<-deps.done
		phase("depsWait")
		res.Phases["deps"] = deps.took
		if deps.err != nil {
			log.Warn("deps layer restore failed", zap.Error(deps.err))
		}
		res.DepsRestored = deps.ok
		deps = nil
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

func logger(o Options) *zap.Logger {
	if o.Log == nil {
		return zap.NewNop().Named("coldstart")
	}
	return o.Log.Named("coldstart")
}

// depsJob is layer 1's restore running beside the main path.
type depsJob struct {
	cancel context.CancelFunc
	done   chan struct{}
	ok     bool
	err    error
	took   time.Duration
}

// startDeps restores the deps layer in the background: by hash when given
// (read from HEAD before the work tree exists), else from the lockfile on
// disk. Nil S3 gives nil.
func startDeps(ctx context.Context, o Options, hash string) *depsJob {
	if o.S3 == nil {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	j := &depsJob{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(j.done)
		start := time.Now()
		if hash != "" {
			j.ok, j.err = o.S3.RestoreDepsHash(ctx, hash)
		} else {
			j.ok, j.err = o.S3.RestoreDeps(ctx)
		}
		j.took = time.Since(start)
	}()
	return j
}
