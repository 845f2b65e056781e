package agentloop

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/wait"
)

// Plan limits: a model call refused by the workspace's plan —
// 429 rate_limited with Retry-After, 402 usage_limit_reached with
// resets_at — is an error the caller can act on. A sync caller gets it as
// is (the webhook answers 429 or 402 with the same hints); an accepted
// async message (Request.WaitForLimits) waits for the limit and calls
// again, as long as the wait ends within the turn's deadline.

// minLimitWait is the shortest wait before a refused call is retried.
const minLimitWait = time.Second

// retryAfter reads a Retry-After header in seconds (0 when absent or an
// HTTP date, which the API never sends).
func retryAfter(h http.Header) time.Duration {
	s, err := strconv.Atoi(strings.TrimSpace(h.Get("Retry-After")))
	if err != nil || s < 0 {
		return 0
	}
	return time.Duration(s) * time.Second
}

// LimitWait is how long to wait before the call refused with err may
// succeed, and whether err is a plan limit at all.
func LimitWait(err error, now time.Time) (time.Duration, bool) {
	var e *Error
	if !errors.As(err, &e) {
		return 0, false
	}
	switch {
	case e.Code == "rate_limited" || e.Status == http.StatusTooManyRequests:
		return max(e.RetryAfter, minLimitWait), true
	case e.Code == "usage_limit_reached" || e.Status == http.StatusPaymentRequired:
		t, perr := time.Parse(time.RFC3339, e.ResetsAt)
		if perr != nil {
			return 0, false // no reset time: nothing to wait for
		}
		return max(t.Sub(now), minLimitWait), true
	}
	return 0, false
}

// completeWaiting is complete, retried after a plan limit's wait when
// retry is set and the wait ends before ctx's deadline.
func (a *Agent) completeWaiting(ctx context.Context, msgs []message, retry bool, corr string) (*chatResponse, error) {
	for {
		resp, err := a.complete(ctx, msgs)
		if err == nil || !retry {
			return resp, err
		}
		d, ok := LimitWait(err, time.Now())
		if !ok {
			return nil, err
		}
		if dl, has := ctx.Deadline(); has && time.Now().Add(d).After(dl) {
			return nil, err
		}
		a.log.Info("model call refused by the plan's limit; waiting to retry", zap.String("correlationId", corr),
			zap.Duration("wait", d), zap.Error(err))
		if wait.For(ctx, d) != nil {
			return nil, ContextError(ctx)
		}
	}
}
