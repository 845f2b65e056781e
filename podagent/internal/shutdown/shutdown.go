// Package shutdown is the pod's graceful shutdown on SIGTERM in git_only
// (spec 10.2), in this order:
//
//  1. drain in-flight work;
//  2. one final git flush with a 5000 ms limit (success leaves or exits
//     the degraded state; failure leaves it degraded);
//  3. if healthy: upload a snapshot of HEAD's content (without
//     node_modules) as project-src.tar.gz;
//  4. otherwise: S3 flush with a 10000 ms limit and forceProjectArchive
//     (the live work tree is tarred);
//  5. the cold-start tarball is always written: if step 3 fails, step 4
//     runs as the fallback.
//
// A fenced pod (another writer holds the project) writes nothing.
//
// The whole sequence fits the grace period the runtime gives between
// SIGTERM and SIGKILL: the caller's ctx carries that
// deadline (less a margin); the drain — in-flight HTTP requests, webhook
// turns, the turn in progress — gets only what the two flushes leave
// (DrainDeadline), and every step is bounded by its own limit even when the
// work below it does not watch its context (a step that overruns is
// abandoned: the process exits next).
package shutdown

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/settings"
)

// Limits of spec 8.
const (
	GitFlushTimeout = 5000 * time.Millisecond
	S3FlushTimeout  = 10000 * time.Millisecond
)

// Margin is kept between the end of the sequence and the runtime's SIGKILL
// (process exit, logs).
const Margin = time.Second

// Reserve is the part of the grace period the flushes need.
const Reserve = GitFlushTimeout + S3FlushTimeout

// Deadline is when the sequence must be done, for a grace period starting
// now.
func Deadline(now time.Time, grace time.Duration) time.Time { return now.Add(grace - Margin) }

// DrainDeadline is when draining must stop for the flushes to fit before
// deadline (at once when the grace is shorter than the flushes).
func DrainDeadline(deadline time.Time) time.Time { return deadline.Add(-Reserve) }

// bounded runs fn with ctx limited to d and returns at the latest then,
// also when fn does not watch its context (its result is dropped).
func bounded(ctx context.Context, d time.Duration, fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Steps are the operations of the sequence.
type Steps struct {
	Drain              func(ctx context.Context) error
	GitFlush           func(ctx context.Context, timeout time.Duration) error
	Healthy            func() bool
	Fenced             func() bool
	UploadHEADSnapshot func(ctx context.Context) error
	S3Flush            func(ctx context.Context, forceProjectArchive bool) error
	// ForceProjectArchive is true in git_only (spec 10.2.4).
	ForceProjectArchive bool
	GitFlushTimeout     time.Duration // 0 = GitFlushTimeout
	S3FlushTimeout      time.Duration // 0 = S3FlushTimeout
	Log                 *zap.Logger
}

// Result reports what happened.
type Result struct {
	GitFlushErr      error
	HealthyAtFlush   bool
	SnapshotErr      error
	S3FlushErr       error
	ColdStartWritten bool
}

// Run executes the sequence.
func Run(ctx context.Context, s Steps) Result {
	log := s.Log
	if log == nil {
		log = zap.NewNop()
	}
	log = log.Named("shutdown")
	gitLimit, s3Limit := s.GitFlushTimeout, s.S3FlushTimeout
	gitLimit = settings.PositiveOr(gitLimit, GitFlushTimeout)
	s3Limit = settings.PositiveOr(s3Limit, S3FlushTimeout)
	var res Result

	// Each phase keeps its own limit; the drain gets what is left before
	// them when ctx has a deadline.
	drainCtx, cancelDrain := context.WithCancel(ctx)
	if dl, ok := ctx.Deadline(); ok {
		drainCtx, cancelDrain = context.WithDeadline(context.WithoutCancel(ctx), DrainDeadline(dl))
	}
	err := bounded(drainCtx, time.Until(deadlineOr(drainCtx, time.Hour)), s.Drain)
	cancelDrain()
	if err != nil {
		log.Warn("drain cut off to leave the flushes their time", zap.Error(err))
	}
	ctx = context.WithoutCancel(ctx) // the flushes have their own limits
	if s.Fenced != nil && s.Fenced() {
		log.Error("shutdown: fenced by another writer; skipping every upload")
		return res
	}
	res.GitFlushErr = bounded(ctx, gitLimit, func(ctx context.Context) error { return s.GitFlush(ctx, gitLimit) })
	if res.GitFlushErr != nil {
		log.Warn("final git flush failed", zap.Error(res.GitFlushErr))
	}
	if s.Fenced != nil && s.Fenced() {
		log.Error("shutdown: fenced by another writer; skipping every upload")
		return res
	}
	// The HEAD snapshot and its fallback share the S3 flush's limit.
	fctx, cancel := context.WithTimeout(ctx, s3Limit)
	defer cancel()
	res.HealthyAtFlush = s.Healthy()
	if res.HealthyAtFlush {
		res.SnapshotErr = bounded(fctx, s3Limit, s.UploadHEADSnapshot)
		if res.SnapshotErr == nil {
			res.ColdStartWritten = true
			log.Info("shutdown: HEAD snapshot uploaded as project-src.tar.gz")
			return res
		}
		log.Warn("HEAD snapshot failed; falling back to the S3 flush", zap.Error(res.SnapshotErr))
	}
	res.S3FlushErr = bounded(fctx, s3Limit, func(ctx context.Context) error { return s.S3Flush(ctx, s.ForceProjectArchive) })
	if res.S3FlushErr != nil {
		log.Error("S3 flush failed; the cold-start tarball was not written", zap.Error(res.S3FlushErr))
		return res
	}
	res.ColdStartWritten = true
	log.Info("shutdown: S3 flush done", zap.Bool("forceProjectArchive", s.ForceProjectArchive))
	return res
}

// deadlineOr is ctx's deadline, or now+d without one.
func deadlineOr(ctx context.Context, d time.Duration) time.Time {
	if dl, ok := ctx.Deadline(); ok {
		return dl
	}
	return time.Now().Add(d)
}
