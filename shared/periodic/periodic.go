// Package periodic runs a background job on a fixed interval until its
// context ends (the API server's janitor, parity check, LFS collector and
// idle-pod reaper).
package periodic

import (
	"context"
	"time"

	"github.com/svc-dev/svc/shared/chans"
)

// Every calls job once per interval, the first time one interval from now,
// until ctx ends. A job that is running when ctx ends is not interrupted:
// Every returns after it.
func Every(ctx context.Context, interval time.Duration, job func(ctx context.Context)) {
	run(ctx, interval, false, job)
}

// EveryFromNow is Every with one more call of job at once.
func EveryFromNow(ctx context.Context, interval time.Duration, job func(ctx context.Context)) {
	run(ctx, interval, true, job)
}

func run(ctx context.Context, interval time.Duration, now bool, job func(ctx context.Context)) {
	if now {
		job(ctx)
	}
	chans.Every(ctx.Done(), interval, func() bool { job(ctx); return true })
}
