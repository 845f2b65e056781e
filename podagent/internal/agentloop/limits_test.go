package agentloop_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/svc-dev/svc/podagent/internal/agentloop"
	"github.com/svc-dev/svc/podagent/internal/agentloop/fakegateway"
)

// A model call refused by the workspace's plan (429 with Retry-After): an
// accepted async message (WaitForLimits) waits and calls again when the
// wait ends within the turn's deadline; otherwise — a sync message, or a
// wait past the deadline — the turn ends with the limit's error carrying
// its Retry-After, without waiting.
func TestPlanLimitWaitsOnlyForAsyncWithinTheDeadline(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		wait       bool
		retryAfter string
		deadline   time.Duration
		wantReply  string // "" = the rate_limited error
		calls      int
	}{
		{"async within the deadline", true, "1", time.Minute, "done after the wait", 2},
		{"sync", false, "1", time.Minute, "", 1},
		{"async past the deadline", true, "30", 5 * time.Second, "", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, gw, _, _ := newAgent(t, 3)
			gw.Sequence(fakegateway.Reply{Status: 429, Code: "rate_limited", RetryAfter: tc.retryAfter},
				fakegateway.Reply{Text: "done after the wait"})
			ctx, cancel := context.WithTimeout(context.Background(), tc.deadline)
			defer cancel()
			start := time.Now()
			res, err := a.Run(ctx, agentloop.Request{Message: "hi", WaitForLimits: tc.wait})
			if n := len(gw.Requests()); n != tc.calls {
				t.Fatalf("%d model calls, want %d", n, tc.calls)
			}
			if tc.wantReply != "" {
				if err != nil || res.Reply != tc.wantReply {
					t.Fatalf("reply %q err %v, want %q", res.Reply, err, tc.wantReply)
				}
				if time.Since(start) < time.Second {
					t.Fatalf("retried after %v, before the Retry-After second", time.Since(start))
				}
				return
			}
			var ae *agentloop.Error
			if !errors.As(err, &ae) || ae.Code != "rate_limited" || ae.RetryAfter.String() != tc.retryAfter+"s" {
				t.Fatalf("err = %#v, want rate_limited with Retry-After %ss", err, tc.retryAfter)
			}
			if ctx.Err() != nil {
				t.Fatal("the turn waited until its deadline instead of ending at once")
			}
		})
	}
}
