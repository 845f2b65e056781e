package upstream

import (
	"testing"
	"time"
)

// A request's rounds wait BackoffBase doubled per round with ±50 % jitter,
// never more than BackoffMax.
func TestRouterBackoff(t *testing.T) {
	t.Parallel()
	r := &Router{o: RouterOptions{BackoffBase: 100 * time.Millisecond, BackoffMax: 400 * time.Millisecond}}
	for run := 0; run < 50; run++ {
		b := r.backoff()
		for i, want := range []struct{ lo, hi time.Duration }{
			{50 * time.Millisecond, 150 * time.Millisecond},
			{100 * time.Millisecond, 300 * time.Millisecond},
			{200 * time.Millisecond, 400 * time.Millisecond},
			{200 * time.Millisecond, 400 * time.Millisecond},
			{200 * time.Millisecond, 400 * time.Millisecond},
		} {
			d, stop := b.Next()
			if stop || d < want.lo || d > want.hi {
				t.Fatalf("round %d: wait %v (stop %v), want within [%v, %v]", i+1, d, stop, want.lo, want.hi)
			}
		}
	}
}
