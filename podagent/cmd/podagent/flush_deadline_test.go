package main

import (
	"context"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/wire"
)

// A git-flush while object storage hangs ran its persist
// attempts to their own timeouts (minutes), long after the caller gave up.
// The typed client sends its timeout (internalapi.HeaderTimeout) and the
// pod bounds the flush by it, so the caller reads a 503 answer — not its own
// timeout — and the turn stays committed locally for a later persist.
func TestFlushBoundedByCallersTimeout(t *testing.T) {
	t.Parallel()
	e, proxy, p := startPersistedBehindFaultProxy(t)
	pc := &internalapi.PodClient{BaseURL: "http://" + p.addr, Token: token, Timeout: 3 * time.Second}

	proxy.SetHang(true)
	e.write("b.txt", "b\n")
	_, err := pc.GitFlush(context.Background(), wire.GitFlushRequest{})
	se, ok := internalapi.AsStatus(err)
	if !ok || se.Status != 503 || (se.Body.Error.Code != "not_persisted" && se.Body.Error.Code != "flush_timeout") {
		t.Fatalf("flush while storage hangs: %v; want a 503 answer within the caller's 3 s timeout", err)
	}
	e.requireCommitted("b.txt", "b\n")

	proxy.SetHang(false)
	pc.Timeout = 30 * time.Second
	if _, err := pc.GitFlush(context.Background(), wire.GitFlushRequest{}); err != nil {
		t.Fatalf("flush once storage answers again: %v\n%s", err, e.logs())
	}
}
