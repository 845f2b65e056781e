// Package pause is the wait between attempts of the service's retry loops
// (the callback deliverer's backoff, spec 5.4; the upstream router's retry
// rounds; the pairing dialler): it ends as soon as the caller gives up.
package pause

import (
	"context"
	"time"
)

// For waits d and returns nil, or returns ctx.Err() as soon as ctx is done.
// A d of zero or less returns nil at once.
func For(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
