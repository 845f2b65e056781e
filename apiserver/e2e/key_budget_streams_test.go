package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/testenv/fakeupstream"
)

// TestKeyBudgetParallelStreams: rounds of parallel
// streamed chat completions of one key, each held open by the upstream
// until every request of the round has its answer, so the admitted ones
// are in flight together. Each round admits only what fits the budget at
// the largest request cost seen (one request when nothing more fits);
// refusals are 429 key_budget_reserved, then 402 key_budget_exceeded once
// the budget is spent. Afterwards the key has used exactly what its
// admitted requests cost, past the limit by at most one request.
func TestKeyBudgetParallelStreams(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const cost = 3000 // micro-credits: 1000 prompt tokens at 3 credits per Mtok
	var mu sync.Mutex
	hold := make(chan struct{})
	e.upstream.Script(func(fakeupstream.Request) fakeupstream.Reply {
		mu.Lock()
		defer mu.Unlock()
		return fakeupstream.Reply{Text: "x", PromptTokens: 1000, Hold: hold}
	})
	a := e.startAPI()
	acc := e.account("free")
	const limit = 5*cost + cost/2
	e.admin("key", "set-budget", "--id", acc.keyID, "--credits", "0.0165", "--window", "daily")
	e.admin("member", "add", "--workspace", acc.workspace, "--user", acc.user, "--role", "owner")
	owner := e.admin("key", "create", "--workspace", acc.workspace, "--user", acc.user, "--name", "owner")["key"].(string)
	budgetURL := a.URL + "/api/workspaces/" + acc.workspace + "/keys/" + acc.keyID + "/budget"
	type budget struct {
		UsedMicro, LimitMicro, InFlight int64
	}
	// settled waits until the key's requests have all settled (a stream
	// settles just after its last event reached the client).
	settled := func() budget {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			resp, b := do(t, http.MethodGet, budgetURL, owner, nil, nil)
			var got budget
			must(t, json.Unmarshal(b, &got))
			if resp.StatusCode == 200 && got.InFlight == 0 {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("budget still has requests in flight: %d %s", resp.StatusCode, b)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	body := []byte(`{"model":"svc-2-0","stream":true,"messages":[{"role":"user","content":"spend"}]}`)
	admittedTotal := int64(0)
	for round := 0; ; round++ {
		if round > 10 {
			t.Fatal("the budget was not spent in 10 rounds")
		}
		before := settled()
		const n = 12
		var wg sync.WaitGroup
		statuses := make([]int, n)
		codes := make([]string, n)
		bodies := make([]io.ReadCloser, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest(http.MethodPost, a.URL+"/v1/chat/completions", strings.NewReader(string(body)))
				req.Header.Set("Authorization", "Bearer "+acc.key)
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				statuses[i] = resp.StatusCode
				if resp.StatusCode == 200 {
					bodies[i] = resp.Body // held open by the upstream
					return
				}
				var env struct {
					Error struct{ Code string } `json:"error"`
				}
				_ = json.NewDecoder(resp.Body).Decode(&env)
				resp.Body.Close()
				codes[i] = env.Error.Code
			}()
		}
		wg.Wait() // every request has its answer; the admitted ones are all in flight
		admitted, reserved, exceeded := int64(0), 0, 0
		for i := range n {
			switch {
			case statuses[i] == 200:
				admitted++
			case statuses[i] == 429 && codes[i] == "key_budget_reserved":
				reserved++
			case statuses[i] == 402 && codes[i] == "key_budget_exceeded":
				exceeded++
			default:
				t.Fatalf("round %d: answer %d %q", round, statuses[i], codes[i])
			}
		}
		if admitted > 1 && before.UsedMicro+admitted*cost > limit {
			t.Fatalf("round %d: %d streams in flight at %d used: more than the limit %d", round, admitted, before.UsedMicro, limit)
		}
		mu.Lock()
		close(hold)
		hold = make(chan struct{})
		mu.Unlock()
		for _, b := range bodies {
			if b != nil {
				_, _ = io.Copy(io.Discard, b)
				b.Close()
			}
		}
		admittedTotal += admitted
		if admitted == 0 {
			if exceeded != n {
				t.Fatalf("round %d: nothing admitted, %d of %d refusals are 402", round, exceeded, n)
			}
			if round < 3 {
				t.Fatalf("spent in %d rounds: want the learning round, a parallel round and the last single request", round)
			}
			break
		}
	}
	got := settled()
	if got.UsedMicro != admittedTotal*cost || got.UsedMicro < limit || got.UsedMicro > limit+cost {
		t.Fatalf("used %d after %d admitted streams of %d: want exactly their cost, spent, at most one request (%d) past %d",
			got.UsedMicro, admittedTotal, cost, cost, limit)
	}
}
