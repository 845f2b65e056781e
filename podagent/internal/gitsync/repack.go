package gitsync

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/settings"
)

// DefaultRepackLooseObjects is the default loose-object threshold: about
// 25 turns of a typical project (a turn writes a commit, a few trees and
// the changed blobs).
const DefaultRepackLooseObjects = 256

// Repacker packs the repository's loose objects in the background once
// there are more than Loose, so a restore's cost follows the pack count,
// not the turn count (pods set gc.auto=0). The mode that persists .git
// calls Maybe after a persist. One runs at a time; it holds the repository
// lock, so no commit or snapshot sees a half-done repack, and it is
// bounded by Timeout.
type Repacker struct {
	repo    *Repo
	loose   int
	timeout time.Duration
	log     *zap.Logger

	running atomic.Bool
	wg      sync.WaitGroup
	ctx     context.Context
	cancel  context.CancelFunc
}

// NewRepacker returns the repacker of repo: loose 0 means
// DefaultRepackLooseObjects, negative disables; timeout 0 means 60s.
func NewRepacker(repo *Repo, loose int, timeout time.Duration, log *zap.Logger) *Repacker {
	if log == nil {
		log = zap.NewNop()
	}
	if loose == 0 {
		loose = DefaultRepackLooseObjects
	}
	r := &Repacker{repo: repo, loose: loose, timeout: settings.PositiveOr(timeout, time.Minute), log: log.Named("gitsync")}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r
}

// Maybe starts a repack in the background if there are more loose objects
// than the threshold and none runs.
func (r *Repacker) Maybe() {
	if r == nil || r.loose < 0 || !r.running.CompareAndSwap(false, true) {
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer r.running.Store(false)
		loose, err := r.repo.LooseObjects()
		if err != nil || loose <= r.loose {
			return
		}
		ctx, cancel := context.WithTimeout(r.ctx, r.timeout)
		defer cancel()
		start := time.Now()
		r.repo.Lock()
		packs, err := r.repo.Repack(ctx)
		r.repo.Unlock()
		if err != nil {
			r.log.Warn("packing loose objects failed", zap.Int("loose", loose), zap.Error(err))
			return
		}
		r.log.Info("packed loose objects", zap.Int("loose", loose), zap.Int("packs", packs), zap.Duration("took", time.Since(start)))
	}()
}

// Wait waits for a running repack to end.
func (r *Repacker) Wait() {
	if r != nil {
		r.wg.Wait()
	}
}

// Close cancels a running repack and waits for it.
func (r *Repacker) Close() {
	if r != nil {
		r.cancel()
		r.wg.Wait()
	}
}
