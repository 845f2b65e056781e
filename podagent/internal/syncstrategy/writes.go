package syncstrategy

import (
	"context"
	"errors"
	"time"

	"github.com/sethvargo/go-retry"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/checkpoints"
	"github.com/svc-dev/svc/podagent/internal/coldstart"
	"github.com/svc-dev/svc/podagent/internal/degrade"
	"github.com/svc-dev/svc/podagent/internal/durable"
	"github.com/svc-dev/svc/podagent/internal/gitsync"
	"github.com/svc-dev/svc/podagent/internal/ownership"
	"github.com/svc-dev/svc/podagent/internal/s3sync"
	"github.com/svc-dev/svc/shared/settings"
	"github.com/svc-dev/svc/shared/syncmode"
)

// Writer is one mode's writes: the events of the turn engine
// (gitsync.Writer) and the mode's cold start, which restores from the
// stores the Writer writes.
type Writer interface {
	gitsync.Writer
	// Restore is the mode's cold start (spec 10.1.5–10.1.7): from the
	// durable .git in git_only (coldstart.FromGit), from the S3 layers and
	// the origin's history in s3 and dual_shadow (coldstart.FromS3).
	Restore(ctx context.Context, o coldstart.Options) (coldstart.Result, error)
}

// Stores are what a mode's Writer writes and reports to. Every store is
// fenced by Lease (docs/sync-modes.md §11); a Writer uses the ones its mode
// writes.
type Stores struct {
	Repo      *gitsync.Repo
	Lease     *ownership.Lease
	Persister *durable.Persister    // git_only: the durable .git
	Recorder  *checkpoints.Recorder // git_only: checkpoint records
	Repack    *gitsync.Repacker     // git_only: packs loose objects after a persist
	Origin    *gitsync.Origin       // dual_shadow: the API origin (Strategy.Origin)
	S3        *s3sync.S3Sync        // the S3 layers (every mode writes layer 1)
	Large     LargeFiles            // the mode's large files (Strategy.LargeFiles)
	Machine   *degrade.Machine
	Metrics   *gitsync.Metrics
	Log       *zap.Logger

	// PersistAttempts is how many uploads (or pushes) one durability step
	// tries (default 3); PersistBackoff the first wait between them
	// (default 200ms, exponential); PersistTimeout bounds one attempt
	// (default 60s).
	PersistAttempts int
	PersistBackoff  time.Duration
	PersistTimeout  time.Duration
}

// base is what every mode's Writer shares: the fence, the durability step
// reported to the degrade machine, the bounded retry of one upload.
type base struct {
	mode    syncmode.Mode
	lease   *ownership.Lease
	machine *degrade.Machine
	metrics *gitsync.Metrics
	log     *zap.Logger

	attempts int
	backoff  time.Duration
	timeout  time.Duration
}

func newBase(mode syncmode.Mode, s Stores) base {
	log := s.Log
	if log == nil {
		log = zap.NewNop()
	}
	if s.Lease == nil {
		panic("syncstrategy: Stores.Lease is required")
	}
	if s.Metrics == nil {
		s.Metrics = gitsync.NewMetrics()
	}
	if s.Lease.Fenced() {
		s.Metrics.Fenced.Set(1)
	}
	return base{mode: mode, lease: s.Lease, machine: s.Machine, metrics: s.Metrics, log: log.Named("gitsync"),
		attempts: settings.PositiveOr(s.PersistAttempts, 3),
		backoff:  settings.PositiveOr(s.PersistBackoff, 200*time.Millisecond),
		timeout:  settings.PositiveOr(s.PersistTimeout, 60*time.Second)}
}

// fenced reports whether another pod owns the project.
func (b *base) fenced() bool { return b.lease.Fenced() }

// fence is the mark a fenced outcome leaves (the metric; the Lease itself
// is already fenced); it returns ErrFenced.
func (b *base) fence() error {
	b.metrics.Fenced.Set(1)
	return gitsync.ErrFenced
}

// step runs one durability step and reports the outcome to the degrade
// machine (a fenced outcome is not a durability failure).
func (b *base) step(ctx context.Context, durability func(context.Context) error) error {
	if b.fenced() {
		return b.fence()
	}
	err := durability(ctx)
	switch {
	case err == nil:
		b.machine.Success()
	case errors.Is(err, gitsync.ErrFenced):
		// Not a transient durability failure: the pod stops writing.
		err = b.fence()
	default:
		b.metrics.PersistFailures.Inc()
		b.log.Warn("durability step failed", zap.String("mode", string(b.mode)), zap.Error(err),
			zap.Int("consecutiveFailures", b.machine.ConsecutiveFailures()+1))
		b.machine.Failure(err)
	}
	if b.machine.Degraded() {
		b.metrics.Degraded.Set(1)
	} else {
		b.metrics.Degraded.Set(0)
	}
	return err
}

// upload runs one upload with bounded retries, each attempt bounded by the
// timeout; a fenced answer is not retried.
func (b *base) upload(ctx context.Context, what string, put func(context.Context) error) error {
	bo := retry.WithMaxRetries(uint64(b.attempts-1), retry.NewExponential(b.backoff))
	return retry.Do(ctx, bo, func(ctx context.Context) error {
		actx, cancel := context.WithTimeout(ctx, b.timeout)
		defer cancel()
		err := put(actx)
		if err != nil && !errors.Is(err, gitsync.ErrFenced) {
			b.log.Debug(what+" attempt failed", zap.Error(err))
			return retry.RetryableError(err)
		}
		return err
	})
}

// ensureDeps makes sure the deps layer of the current lockfile exists
// (git-flush and the shutdown flush; turns upload it in the background). A
// failure is logged, not returned: the layer is a cache of node_modules.
func (b *base) ensureDeps(ctx context.Context, s3 *s3sync.S3Sync) {
	if s3 == nil || b.fenced() {
		return
	}
	if err := b.lease.Check(ctx); err != nil {
		return
	}
	if err := s3.EnsureDeps(ctx); err != nil {
		b.log.Warn("deps layer upload failed", zap.Error(err))
	}
}
