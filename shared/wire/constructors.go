package wire

import (
	"fmt"
	"strconv"
	"time"
)

// Constructors of the common coded errors whose message needs arguments
// (spec 7.1). Domain packages return these; each binary's one error
// writer answers them.

func InvalidAPIKey() *Error {
	return Coded(CodeInvalidAPIKey,
		"Invalid API key. Pass a service API key (svc_sk_…) as 'Authorization: Bearer <key>'.")
}

func UsageLimitReached(window string, resetsAt time.Time) *Error {
	e := Coded(CodeUsageLimitReached,
		fmt.Sprintf("Your workspace is out of included usage for the %s window. Enable usage-based pricing or upgrade your plan.", window))
	e.ResetsAt = resetsAt.UTC().Format(time.RFC3339)
	return e
}

func RateLimited(retryAfter time.Duration, headers map[string]string) *Error {
	secs := int((retryAfter + time.Second - 1) / time.Second)
	if secs < 1 {
		secs = 1
	}
	e := Coded(CodeRateLimited,
		fmt.Sprintf("Too many requests. Retry after %d seconds.", secs))
	e.Headers = map[string]string{"Retry-After": strconv.Itoa(secs)}
	for k, v := range headers {
		e.Headers[k] = v
	}
	return e
}

// Unavailable is a dependency outage (database, storage): 503 with a short
// Retry-After, details logged and not sent.
func Unavailable(cause error) *Error {
	e := Coded(CodeServiceUnavailable,
		"The service is temporarily unavailable; retry shortly.")
	e.Headers = map[string]string{"Retry-After": "1"}
	e.Cause = cause
	return e
}

func Internal(cause error) *Error {
	e := Coded(CodeInternalError, "Internal server error.")
	e.Cause = cause
	return e
}
