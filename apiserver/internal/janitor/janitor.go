// Package janitor keeps the API server's bookkeeping tables bounded: rate
// counters of minutes that are over (spec 8 rate limits), outbox messages
// delivered long ago (spec 4.2 outbox), expired console sessions and
// sign-in links, webhook attempts past their retention and channel secrets
// whose rotation overlap ended. Every replica runs it; the
// deletes are idempotent, so replicas sweeping together do no harm.
package janitor

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/metering"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/wait"
)

// Defaults.
const (
	Interval = time.Minute
	// OutboxRetention keeps delivered messages long enough that a pod
	// re-sending one (after a lost answer) is recognised and not delivered
	// twice.
	OutboxRetention = 7 * 24 * time.Hour
	// DefaultAttemptRetention keeps the webhook attempt log
	// (SVC_WEBHOOK_ATTEMPT_RETENTION).
	DefaultAttemptRetention = 7 * 24 * time.Hour
)

// Janitor sweeps the store.
type Janitor struct {
	Store *store.Store
	Log   *zap.Logger
	Now   func() time.Time
	// AttemptRetention bounds the webhook attempt log (0: DefaultAttemptRetention).
	AttemptRetention time.Duration
}

// Sweep deletes what is no longer needed, once.
func (j *Janitor) Sweep(ctx context.Context) error {
	now := time.Now
	if j.Now != nil {
		now = j.Now
	}
	t := now()
	// A counter is needed until its window ends; keep one more window for
	// requests admitted right at the boundary.
	rates, err := j.Store.PruneRateCounters(ctx, t.Truncate(metering.RateWindow).Add(-metering.RateWindow))
	if err != nil {
		return err
	}
	outbox, err := j.Store.PruneOutbox(ctx, t.Add(-OutboxRetention))
	if err != nil {
		return err
	}
	// Console sessions and sign-in links past their absolute expiry.
	sessions, err := j.Store.PruneSessions(ctx, t)
	if err != nil {
		return err
	}
	// The webhook attempt log past its retention, and the secrets a
	// rotation replaced once their overlap ended.
	keep := j.AttemptRetention
	if keep <= 0 {
		keep = DefaultAttemptRetention
	}
	attempts, err := j.Store.PruneWebhookAttempts(ctx, t.Add(-keep))
	if err != nil {
		return err
	}
	secrets, err := j.Store.PruneExpiredSecrets(ctx, t)
	if err != nil {
		return err
	}
	if rates+outbox+sessions+attempts+secrets > 0 {
		j.Log.Debug("janitor swept", zap.Int64("rateCounters", rates), zap.Int64("outboxMessages", outbox),
			zap.Int64("consoleSessions", sessions), zap.Int64("webhookAttempts", attempts), zap.Int64("replacedSecrets", secrets))
	}
	return nil
}

// Run sweeps every interval until ctx ends.
func (j *Janitor) Run(ctx context.Context, interval time.Duration) {
	wait.EveryFromNow(ctx, interval, func(ctx context.Context) {
		if err := j.Sweep(ctx); err != nil && ctx.Err() == nil {
			j.Log.Warn("janitor sweep failed", zap.Error(err))
		}
	})
}
