package e2e

import (
	"net/http"
	"testing"
)

// The agent's tool loop is metered like any client (spec part B): a
// webhook turn whose agent calls the model twice (a write_file call, then
// the final text) is two requests with the upstream's tokens and their
// credits, billed to the project's workspace and to no other.
func TestWebhookTurnUsageIsBilledToTheProjectWorkspace(t *testing.T) {
	t.Parallel()
	w, _ := webhookWorld(t)
	other := w.e.account("free")
	w.e.upstream.Script(agentScript("notes/usage.txt", "metered", "wrote it", nil))
	if u := usageOf(t, w.e, w.acc.workspace); u != (usageSnapshot{}) {
		t.Fatalf("usage before the turn %+v", u)
	}

	res, body := w.do(t, http.MethodPost, "/agent/channels/webhook/incoming", []byte(`{"message":"write it"}`), hookHeaders())
	if res.StatusCode != http.StatusOK {
		t.Fatalf("incoming: %d %s", res.StatusCode, body)
	}
	if n := len(w.e.upstream.Requests()); n != 2 {
		t.Fatalf("the agent called the model %d times, want 2", n)
	}
	u := waitUsage(t, w.e, w.acc.workspace, 2)
	// agentScript: 20 prompt + 6 completion tokens, then 30 + 4; svc-2-0
	// costs 3 per Mtok in and 15 out (micro-credits = tokens × price).
	want := usageSnapshot{requests: 2, prompt: 50, completion: 10, credits: 3*50 + 15*10}
	if u != want {
		t.Fatalf("the project workspace's usage %+v, want %+v", u, want)
	}
	if u := usageOf(t, w.e, other.workspace); u != (usageSnapshot{}) {
		t.Fatalf("another workspace was billed: %+v", u)
	}
}
