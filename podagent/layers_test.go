package podagent_test

import (
	"testing"

	"github.com/svc-dev/svc/shared/testenv/layers"
)

// The pod agent's packages form floors (docs/design.md
// §2): the binaries; the wiring (pod); the route table (server); the
// webhook channel and the sync engine side by side, neither importing the
// other; the sync engine's own floors (the strategies over cold start over
// gitsync over durable, checkpoints and s3sync); and the journal at the
// bottom. No import runs back up, and no folder imports another that
// imports it back.
func TestLayers(t *testing.T) {
	t.Parallel()
	forbidden := []layers.Edge{
		{From: "", To: "cmd", Except: []string{"cmd"}, Why: "nothing imports a binary"},
		{From: "internal", To: "internal/pod", Except: []string{"internal/pod"}, Why: "pod is the wiring: only the binary imports it"},
		{From: "internal", To: "internal/server", Except: []string{"internal/server", "internal/pod"},
			Why: "the route table sits above every handler; only the wiring imports it"},
		{From: "internal/journal", To: "internal", Except: []string{"internal/journal"},
			Why: "the journal is the bottom floor: the typed views over it import it, not the other way round"},
	}
	for _, low := range []string{"internal/gitsync", "internal/coldstart", "internal/durable", "internal/s3sync",
		"internal/checkpoints", "internal/ownership", "internal/degrade"} {
		forbidden = append(forbidden, layers.Edge{From: low, To: "internal/syncstrategy",
			Why: "the strategies choose the mode's parts; the parts never ask which strategy runs"})
		for _, channel := range []string{"internal/webhook", "internal/turn", "internal/agentloop", "internal/callback"} {
			forbidden = append(forbidden, layers.Edge{From: low, To: channel,
				Why: "the sync engine does not know the webhook channel; the turn orchestrator drives it"})
		}
	}
	for _, part := range []string{"internal/durable", "internal/s3sync", "internal/checkpoints", "internal/ownership"} {
		forbidden = append(forbidden, layers.Edge{From: part, To: "internal/gitsync",
			Why: "gitsync is the engine over durable, s3sync, checkpoints and the lease"})
	}
	layers.Check(t, ".", layers.Rules{Forbidden: forbidden})
}
