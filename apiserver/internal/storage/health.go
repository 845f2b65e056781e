package storage

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sethvargo/go-retry"
	"go.uber.org/zap"
)

// Health watches whether object storage answers, so the API server starts
// and serves everything that needs no storage (the public chat API, the
// outbox) while it is down: /readyz reports it as detail,
// /metrics as svc_object_storage_up, and the check is retried in the
// background (RetryMin doubling to RetryMax with jitter while down, Recheck
// while up).
type Health struct {
	check func(ctx context.Context) error
	log   *zap.Logger

	RetryMin, RetryMax, Recheck time.Duration

	mu   sync.Mutex
	err  error
	once sync.Once
}

// errNotChecked is the state before the first check finished.
var errNotChecked = errors.New("object storage not checked yet")

func newHealth(check func(ctx context.Context) error, log *zap.Logger) *Health {
	return &Health{check: check, log: log, err: errNotChecked,
		RetryMin: time.Second, RetryMax: 30 * time.Second, Recheck: 30 * time.Second}
}

// Err is nil while storage answers, else the last failure.
func (h *Health) Err() error {
	if h == nil {
		return nil // fs: the local directory
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// Start runs the check loop until ctx ends (once).
func (h *Health) Start(ctx context.Context) {
	if h == nil {
		return
	}
	h.once.Do(func() { go h.loop(ctx) })
}

func (h *Health) loop(ctx context.Context) {
	down := h.backoff()
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := h.check(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		h.mu.Lock()
		was := h.err
		h.err = err
		h.mu.Unlock()
		next := h.Recheck
		switch {
		case err != nil:
			if was == nil || errors.Is(was, errNotChecked) {
				h.log.Error("object storage unavailable; serving what needs none and retrying", zap.Error(err))
			}
			next, _ = down.Next()
		case was != nil:
			h.log.Info("object storage available")
			down = h.backoff()
		}
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// backoff paces the checks while storage is down (go-retry, as every retry
// of the service): RetryMin doubling to RetryMax, ±20 % jitter so replicas
// started together do not probe together.
func (h *Health) backoff() retry.Backoff {
	return retry.WithCappedDuration(h.RetryMax, retry.WithJitterPercent(20, retry.NewExponential(h.RetryMin)))
}
