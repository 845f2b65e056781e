package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestKeyBudgetInEveryWireFormat: a budget set through
// the JSON key API stops its key — and only that key — once spent, with a
// 402 billing_error carrying resets_at (the next 00:00 UTC of a daily
// window) in chat completions, Responses and Anthropic Messages, streamed
// or not; the budget reads back as spent; raising it lets the key through
// again, and removing it leaves the key on its workspace's plan only. Bad
// budgets are refused with invalid_budget and change nothing.
func TestKeyBudgetInEveryWireFormat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.startAPI()
	acc := e.account("free")
	e.admin("member", "add", "--workspace", acc.workspace, "--user", acc.user, "--role", "owner")
	other := e.admin("key", "create", "--workspace", acc.workspace, "--user", acc.user, "--name", "other")
	budgetURL := a.URL + "/api/workspaces/" + acc.workspace + "/keys/" + acc.keyID + "/budget"
	jsonH := http.Header{"Content-Type": {"application/json"}}

	for _, bad := range []string{`{"credits": 0, "window": "daily"}`, `{"credits": 1, "window": "weekly"}`,
		`{"credits": 1, "limitMicro": 5, "window": "daily"}`, `{"window": "daily"}`, `[1]`} {
		if resp, b := do(t, http.MethodPut, budgetURL, acc.key, []byte(bad), jsonH); resp.StatusCode != 400 {
			t.Errorf("PUT %s: %d %s, want 400", bad, resp.StatusCode, b)
		}
	}
	if resp, _ := do(t, http.MethodGet, budgetURL, acc.key, nil, nil); resp.StatusCode != 404 {
		t.Fatalf("budget after refused PUTs: %d, want 404 (none set)", resp.StatusCode)
	}
	// 100 micro-credits: a couple of the fake's small answers.
	if resp, b := do(t, http.MethodPut, budgetURL, acc.key, []byte(`{"limitMicro": 100, "window": "daily"}`), jsonH); resp.StatusCode != 200 {
		t.Fatalf("PUT budget: %d %s", resp.StatusCode, b)
	}
	chat := `{"model":"svc-2-0","messages":[{"role":"user","content":"spend"}]%s}`
	// The key's budget is seen by authentication within its cache TTL
	// (0.5 s), which a quiet machine outruns with a fixed number of
	// requests; spend it with plain requests (each settled before its
	// answer is written) until the 402, for at most 30 s.
	spent := false
	for deadline := time.Now().Add(30 * time.Second); !spent && time.Now().Before(deadline); {
		resp, b := do(t, http.MethodPost, a.URL+"/v1/chat/completions", acc.key, []byte(fmt.Sprintf(chat, "")), jsonH)
		switch resp.StatusCode {
		case 200:
		case 402:
			spent = true
		default:
			t.Fatalf("spending: %d %s", resp.StatusCode, b)
		}
	}
	if !spent {
		t.Fatal("the budget of 100 micro-credits was never spent")
	}
	tomorrow := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour).Format(time.RFC3339)
	for _, tc := range []struct{ name, path, body string }{
		{"chat", "/v1/chat/completions", fmt.Sprintf(chat, "")},
		{"chat stream", "/api/v1/chat/completions", fmt.Sprintf(chat, `,"stream":true`)},
		{"responses", "/v1/responses", `{"model":"svc-2-0","input":"spend"}`},
		{"responses stream", "/v1/responses", `{"model":"svc-2-0","input":"spend","stream":true}`},
		{"messages", "/v1/messages", `{"model":"svc-2-0","max_tokens":16,"messages":[{"role":"user","content":"spend"}]}`},
		{"messages stream", "/v1/messages", `{"model":"svc-2-0","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"spend"}]}`},
	} {
		resp, b := do(t, http.MethodPost, a.URL+tc.path, acc.key, []byte(tc.body), jsonH)
		var env struct {
			Inner struct {
				Type     string `json:"type"`
				Code     string `json:"code"`
				ResetsAt string `json:"resets_at"`
			} `json:"error"`
		}
		_ = json.Unmarshal(b, &env)
		if resp.StatusCode != 402 || env.Inner.Type != "billing_error" || env.Inner.ResetsAt != tomorrow {
			t.Errorf("%s with a spent key budget: %d %s; want 402 billing_error resets_at %s", tc.name, resp.StatusCode, b, tomorrow)
		}
		if tc.path != "/v1/messages" && env.Inner.Code != "key_budget_exceeded" {
			t.Errorf("%s: code %q, want key_budget_exceeded", tc.name, env.Inner.Code)
		}
	}
	// The workspace's other key has no budget of its own.
	if resp, b := do(t, http.MethodPost, a.URL+"/v1/chat/completions", other["key"].(string), []byte(fmt.Sprintf(chat, "")), jsonH); resp.StatusCode != 200 {
		t.Fatalf("the other key: %d %s", resp.StatusCode, b)
	}
	resp, b := do(t, http.MethodGet, budgetURL, acc.key, nil, nil)
	var got struct {
		Window     string     `json:"window"`
		LimitMicro int64      `json:"limitMicro"`
		UsedMicro  int64      `json:"usedMicro"`
		InFlight   int64      `json:"inFlight"`
		ResetsAt   *time.Time `json:"resetsAt"`
	}
	must(t, json.Unmarshal(b, &got))
	if resp.StatusCode != 200 || got.Window != "daily" || got.LimitMicro != 100 || got.UsedMicro < 100 || got.InFlight != 0 ||
		got.ResetsAt == nil || got.ResetsAt.UTC().Format(time.RFC3339) != tomorrow {
		t.Fatalf("spent budget reads %d %s", resp.StatusCode, b)
	}
	// A raised limit keeps what was used and admits again.
	if resp, b := do(t, http.MethodPut, budgetURL, acc.key, []byte(`{"credits": 1, "window": "daily"}`), jsonH); resp.StatusCode != 200 {
		t.Fatalf("raising the budget: %d %s", resp.StatusCode, b)
	}
	if resp, b := do(t, http.MethodPost, a.URL+"/v1/responses", acc.key, []byte(`{"model":"svc-2-0","input":"again"}`), jsonH); resp.StatusCode != 200 {
		t.Fatalf("after raising the budget: %d %s", resp.StatusCode, b)
	}
	if resp, _ := do(t, http.MethodDelete, budgetURL, acc.key, nil, nil); resp.StatusCode != 204 {
		t.Fatalf("DELETE budget: %d", resp.StatusCode)
	}
	if resp, _ := do(t, http.MethodGet, budgetURL, acc.key, nil, nil); resp.StatusCode != 404 {
		t.Fatalf("budget after DELETE: %d, want 404", resp.StatusCode)
	}
	// Another workspace's key is not found through this workspace.
	stranger := e.account("free")
	if resp, _ := do(t, http.MethodPut, a.URL+"/api/workspaces/"+acc.workspace+"/keys/"+stranger.keyID+"/budget", acc.key,
		[]byte(`{"credits": 1, "window": "daily"}`), jsonH); resp.StatusCode != 404 {
		t.Fatalf("PUT on another workspace's key: %d, want 404", resp.StatusCode)
	}
	// The admin command sets the same budget.
	set := e.admin("key", "set-budget", "--id", acc.keyID, "--credits", "2", "--window", "monthly")
	if set["limitMicro"].(float64) != 2_000_000 {
		t.Fatalf("key set-budget answered %v", set)
	}
	resp, b = do(t, http.MethodGet, budgetURL, acc.key, nil, nil)
	got.ResetsAt = nil
	must(t, json.Unmarshal(b, &got))
	if resp.StatusCode != 200 || got.Window != "monthly" || got.LimitMicro != 2_000_000 || got.UsedMicro != 0 {
		t.Fatalf("budget after key set-budget: %d %s; want a new monthly window of 2 credits", resp.StatusCode, b)
	}
}
