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

// turnError is the sync answer of a failed turn (errors an
// operator or caller can act on say so):
//
//   - a plan limit of the workspace hit by the agent's model call: 429
//     rate_limit_error with Retry-After, or 402 billing_error with
//     resets_at, as the public API answers them;
//   - a full workspace disk: 507 insufficient_storage naming it;
//   - anything else: 502 (agent_error's status in wire.Codes) with the
//     agent's code and its plain-words reply.
func turnError(err error, reply, corr string) *wire.Error {
	var ae *agentloop.Error
	isAgent := errors.As(err, &ae)
	switch {
	case wire.DiskFull(err):
		e := poderr.DiskFull(err)
		e.CorrelationID = corr
		return e
	case isAgent && (ae.Code == "rate_limited" || ae.Status == http.StatusTooManyRequests):
		wait, _ := agentloop.LimitWait(err, time.Now())
		e := wire.Coded("rate_limited",
			"The workspace's plan limit was reached by the agent's model calls: "+ae.Message+". Retry after the Retry-After seconds.")
		e.CorrelationID = corr
		e.Headers = map[string]string{"Retry-After": strconv.Itoa(int(wait.Seconds()))}
		return e
	case isAgent && (ae.Code == "usage_limit_reached" || ae.Status == http.StatusPaymentRequired):
		e := wire.Coded("usage_limit_reached",
			"The workspace's plan usage limit was reached by the agent's model calls: "+ae.Message+".")
		e.CorrelationID, e.ResetsAt = corr, ae.ResetsAt
		return e
	}
	// agent_error's status (502) and type; the envelope names the agent's
	// own code (the agent loop's, or the model gateway's it relays).
	e := wire.Coded("agent_error", reply)
	e.CorrelationID = corr
	if isAgent {
		e.Code = ae.Code
	}
	return e
}
