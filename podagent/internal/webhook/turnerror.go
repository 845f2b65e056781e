package webhook

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/svc-dev/svc/podagent/internal/agentloop"
	"github.com/svc-dev/svc/podagent/internal/poderr"
	"github.com/svc-dev/svc/shared/wire"
)

// turnError is the sync answer of a failed turn (issue 28: errors an
// operator or caller can act on say so):
//
//   - a plan limit of the workspace hit by the agent's model call: 429
//     rate_limit_error with Retry-After, or 402 billing_error with
//     resets_at, as the public API answers them;
//   - a full workspace disk: 507 insufficient_storage naming it;
//   - anything else: 502 with the agent's code and its plain-words reply.
func turnError(err error, reply, corr string) *Error {
	var ae *agentloop.Error
	isAgent := errors.As(err, &ae)
	switch {
	case wire.DiskFull(err):
		e := poderr.DiskFull(err)
		e.CorrelationID = corr
		return e
	case isAgent && (ae.Code == "rate_limited" || ae.Status == http.StatusTooManyRequests):
		wait, _ := agentloop.LimitWait(err, time.Now())
		return &Error{Status: http.StatusTooManyRequests, Code: "rate_limited", CorrelationID: corr,
			Message: "The workspace's plan limit was reached by the agent's model calls: " + ae.Message + ". Retry after the Retry-After seconds.",
			Headers: map[string]string{"Retry-After": strconv.Itoa(int(wait.Seconds()))}}
	case isAgent && (ae.Code == "usage_limit_reached" || ae.Status == http.StatusPaymentRequired):
		return &Error{Status: http.StatusPaymentRequired, Code: "usage_limit_reached", CorrelationID: corr,
			ResetsAt: ae.ResetsAt,
			Message:  "The workspace's plan usage limit was reached by the agent's model calls: " + ae.Message + "."}
	}
	code := "agent_error"
	if isAgent {
		code = ae.Code
	}
	return &Error{Status: http.StatusBadGateway, Code: code, Message: reply, CorrelationID: corr}
}
