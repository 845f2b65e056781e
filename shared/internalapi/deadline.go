package internalapi

import (
	"context"
	"net/http"
	"strconv"
	"time"
)

// HeaderTimeout carries how long the caller of an internal route will wait
// for the answer, in milliseconds (as gRPC's grpc-timeout). The callee
// bounds its work by it, so that a slow dependency (object storage during
// an outage) yields an error answer the caller still reads, not a timeout
// on the caller's side while the work runs on.
const HeaderTimeout = "X-Svc-Timeout-Ms"

// setTimeout writes ctx's remaining time into h.
func setTimeout(ctx context.Context, h http.Header) {
	if dl, ok := ctx.Deadline(); ok {
		if ms := time.Until(dl).Milliseconds(); ms > 0 {
			h.Set(HeaderTimeout, strconv.FormatInt(ms, 10))
		}
	}
}

// CallerContext is r's context bounded by the caller's HeaderTimeout, less
// a margin for the answer's way back (a tenth, between 100 ms and 1 s).
// Without the header it is r's context (cancelled when the caller hangs up).
func CallerContext(r *http.Request) (context.Context, context.CancelFunc) {
	ms, err := strconv.ParseInt(r.Header.Get(HeaderTimeout), 10, 64)
	if err != nil || ms <= 0 {
		return context.WithCancel(r.Context())
	}
	d := time.Duration(ms) * time.Millisecond
	margin := min(max(d/10, 100*time.Millisecond), time.Second)
	return context.WithTimeout(r.Context(), max(d-margin, d/2))
}
