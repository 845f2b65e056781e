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
package shutdown

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// Limits of spec 8.
const (
	GitFlushTimeout = 5000 * time.Millisecond
	S3FlushTimeout  = 10000 * time.Millisecond
)

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
	if gitLimit <= 0 {
		gitLimit = GitFlushTimeout
	}
	if s3Limit <= 0 {
		s3Limit = S3FlushTimeout
	}
	var res Result

	if err := s.Drain(ctx); err != nil {
		log.Warn("drain", zap.Error(err))
	}
	if s.Fenced != nil && s.Fenced() {
		log.Error("shutdown: fenced by another writer; skipping every upload")
		return res
	}
	res.GitFlushErr = s.GitFlush(ctx, gitLimit)
	if res.GitFlushErr != nil {
		log.Warn("final git flush failed", zap.Error(res.GitFlushErr))
	}
	if s.Fenced != nil && s.Fenced() {
		log.Error("shutdown: fenced by another writer; skipping every upload")
		return res
	}
	res.HealthyAtFlush = s.Healthy()
	if res.HealthyAtFlush {
		res.SnapshotErr = s.UploadHEADSnapshot(ctx)
		if res.SnapshotErr == nil {
			res.ColdStartWritten = true
			log.Info("shutdown: HEAD snapshot uploaded as project-src.tar.gz")
			return res
		}
		log.Warn("HEAD snapshot failed; falling back to the S3 flush", zap.Error(res.SnapshotErr))
	}
	fctx, cancel := context.WithTimeout(ctx, s3Limit)
	defer cancel()
	res.S3FlushErr = s.S3Flush(fctx, s.ForceProjectArchive)
	if res.S3FlushErr != nil {
		log.Error("S3 flush failed; the cold-start tarball was not written", zap.Error(res.S3FlushErr))
		return res
	}
	res.ColdStartWritten = true
	log.Info("shutdown: S3 flush done", zap.Bool("forceProjectArchive", s.ForceProjectArchive))
	return res
}
