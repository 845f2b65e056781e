package apiserver_test

import (
	"testing"

	"github.com/svc-dev/svc/shared/testenv/layers"
)

// The API server's packages form floors (docs/design.md
// §2): the binary, then the route table (server) and the admin CLI, then
// the handler packages, then the domain packages, then the store. No
// import runs back up, and no folder imports another that imports it back.
func TestLayers(t *testing.T) {
	t.Parallel()
	layers.Check(t, ".", layers.Rules{Forbidden: append([]layers.Edge{
		{From: "", To: "cmd", Except: []string{"cmd"}, Why: "nothing imports the binary"},
		{From: "internal", To: "internal/server", Except: []string{"internal/server"},
			Why: "the route table is the top floor; only its own test helper (servertest) imports it"},
		{From: "internal", To: "internal/admin", Except: []string{"internal/admin"},
			Why: "the admin CLI is a top floor; what the console shares with it lives below (apikey.Issue)"},
		{From: "internal/store", To: "internal", Except: []string{"internal/store"}, Why: "the store is the bottom floor"},
	}, domainBelowHandlers()...)})
}

// domainBelowHandlers forbids every domain package to import a handler
// package.
func domainBelowHandlers() []layers.Edge {
	handlers := []string{"agentapi", "agentproxy", "checkpointreads", "console", "gateway", "gitserver", "pairing",
		"publish"}
	domain := []string{"apikey", "catalog", "hydrate", "janitor", "lfsgc", "metering", "outbox", "parity", "runtimes",
		"storage", "tracing", "upstream", "webhookchannel", "webhooklog"}
	var out []layers.Edge
	for _, d := range domain {
		for _, h := range handlers {
			out = append(out, layers.Edge{From: "internal/" + d, To: "internal/" + h,
				Why: "domain packages sit below the HTTP handlers that use them"})
		}
	}
	return out
}
