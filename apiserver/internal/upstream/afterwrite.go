package upstream

import "context"

// Written is work of the caller's that the upstream's answer does not wait
// for: the plain-HTTP transport (h1.go) calls Written once a request sent
// with a context from WithWritten has been written, while the upstream
// works on the answer, before reading it, on the sending goroutine. Other
// transports (HTTPS upstreams on net/http's Transport) do not, nor does a
// request that failed before its write, and a fallback's request calls it
// again: the caller calls it once more after the send returned, and it
// does its work on the first call only.
type Written interface{ Written() }

// writtenKey is the context key of WithWritten.
type writtenKey struct{}

// WithWritten returns ctx carrying w for the requests sent with it.
func WithWritten(ctx context.Context, w Written) context.Context {
	return context.WithValue(ctx, writtenKey{}, w)
}

// written calls ctx's Written, if any.
func written(ctx context.Context) {
	if w, ok := ctx.Value(writtenKey{}).(Written); ok {
		w.Written()
	}
}
