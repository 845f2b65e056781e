// Package shutdown is the pod's graceful shutdown on SIGTERM in git_only
// (spec 10.2), in this order:
//
//  1. drain in-flight work;
//  2. one final git flush with a 5000 ms limit (success leaves or exits
//     the degraded state; failure leaves it degraded — whatever the
//     failure count, the shutdown takes the degraded path: a HEAD whose
//     commit is not in the durable .git must not become the cold-start
//     source);
//  3. if healthy (git_only only): upload a snapshot of HEAD's content
//     (without node_modules) as project-src.tar.gz, within its own
//     SnapshotTimeout;
//  4. otherwise (degraded git_only, dual_shadow, s3): S3 flush with a
//     10000 ms limit and forceProjectArchive in git_only (the live work
//     tree is tarred);
//  5. the cold-start tarball is always written: if step 3 fails, step 4
//     runs as the fallback, with its full 10000 ms (the snapshot's time
//     is not taken from it).
//
// A fenced pod (another writer holds the project) writes nothing.
//
// The whole sequence fits the grace period the runtime gives between
// SIGTERM and SIGKILL: the caller's ctx carries that deadline (less
// Margin); the drain — in-flight HTTP requests, webhook turns, the turn in
// progress — gets only what the flushes may need (Reserve: 5 s git + 5 s
// snapshot + 10 s S3 = 20 s, so 21 s with the margin), and every step is
// bounded by its own limit even when the work below it does not watch its
// context (a step that overruns is abandoned: the process exits next).
// docs/sync-modes.md shows the arithmetic for the runtimes' grace periods.
package shutdown

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/settings"
)

// Limits of spec 8, and the HEAD snapshot's own (the spec gives it none:
// a git archive of HEAD without node_modules, 2 to 10 MB, and one PUT).
const (
	GitFlushTimeout = 5000 * time.Millisecond
	S3FlushTimeout  = 10000 * time.Millisecond
	SnapshotTimeout = 5000 * time.Millisecond
)

// Margin is kept between the end of the sequence and the runtime's SIGKILL
// (process exit, logs).
const Margin = time.Second

// Reserve is the part of the grace period the flushes may need: the git
// flush, then the HEAD snapshot and, when it fails, the S3 flush.
const Reserve = GitFlushTimeout + SnapshotTimeout + S3FlushTimeout

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
	Drain    func(ctx context.Context) error
	GitFlush func(ctx context.Context, timeout time.Duration) error
	// Healthy is the durability state (spec 3.2) after the final flush;
	// nil in a mode without one (s3).
	Healthy func() bool
	Fenced  func() bool
	// UploadHEADSnapshot is step 3, git_only's alone (nil in s3 and
	// dual_shadow: they end with the S3 flush).
	UploadHEADSnapshot func(ctx context.Context) error
	S3Flush            func(ctx context.Context, forceProjectArchive bool) error
	// ForceProjectArchive is true in git_only (spec 10.2.4).
	ForceProjectArchive bool
	GitFlushTimeout     time.Duration // 0 = GitFlushTimeout
	SnapshotTimeout     time.Duration // 0 = SnapshotTimeout
	S3FlushTimeout      time.Duration // 0 = S3FlushTimeout
	Log                 *zap.Logger
}

// Durability states the shutdown reports (Result.Durability).
const (
	Healthy   = "healthy"
	Degraded  = "degraded"
	Untracked = "untracked" // s3: no durability step, no degrade machine
	Fenced    = "fenced"
)

// Cold-start paths (Result.Path).
const (
	PathHEADSnapshot = "head_snapshot"
	PathS3Flush      = "s3_flush"
	PathNone         = "none" // fenced: nothing written
)

// Result reports what happened.
type Result struct {
	GitFlushErr error
	// HealthyAtFlush: the final git flush succeeded and the durability
	// state is healthy (never true in s3, which has none: see Durability).
	HealthyAtFlush bool
	// Durability is the state after the final flush: Healthy, Degraded,
	// Untracked (s3) or Fenced.
	Durability string
	// Path is how the cold-start tarball was written: PathHEADSnapshot,
	// PathS3Flush (also after a failed snapshot) or PathNone.
	Path             string
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
	gitLimit := settings.PositiveOr(s.GitFlushTimeout, GitFlushTimeout)
	snapLimit := settings.PositiveOr(s.SnapshotTimeout, SnapshotTimeout)
	s3Limit := settings.PositiveOr(s.S3FlushTimeout, S3FlushTimeout)
	res := Result{Path: PathNone}

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
	fenced := func() bool {
		if s.Fenced != nil && s.Fenced() {
			res.Durability = Fenced
			log.Error("shutdown: fenced by another writer; skipping every upload")
			return true
		}
		return false
	}
	if fenced() {
		return res
	}
	res.GitFlushErr = bounded(ctx, gitLimit, func(ctx context.Context) error { return s.GitFlush(ctx, gitLimit) })
	if res.GitFlushErr != nil {
		log.Warn("final git flush failed", zap.Error(res.GitFlushErr))
	}
	if fenced() {
		return res
	}
	// Step 2's outcome decides: a failed final flush leaves the pod
	// degraded whatever the failure count, so its HEAD (possibly a commit
	// the durable .git lacks) is not uploaded as the cold-start source.
	switch {
	case s.Healthy == nil:
		res.Durability = Untracked
	case res.GitFlushErr == nil && s.Healthy():
		res.Durability, res.HealthyAtFlush = Healthy, true
	default:
		res.Durability = Degraded
	}
	if res.HealthyAtFlush && s.UploadHEADSnapshot != nil {
		res.SnapshotErr = bounded(ctx, snapLimit, s.UploadHEADSnapshot)
		if res.SnapshotErr == nil {
			res.ColdStartWritten, res.Path = true, PathHEADSnapshot
			log.Info("shutdown: HEAD snapshot uploaded as project-src.tar.gz")
			return res
		}
		log.Warn("HEAD snapshot failed; falling back to the S3 flush", zap.Error(res.SnapshotErr))
	}
	// The S3 flush has its own full limit, also after a failed snapshot.
	res.Path = PathS3Flush
	res.S3FlushErr = bounded(ctx, s3Limit, func(ctx context.Context) error { return s.S3Flush(ctx, s.ForceProjectArchive) })
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
