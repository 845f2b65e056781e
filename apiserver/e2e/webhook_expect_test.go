package e2e

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Curl sends Expect: 100-continue by itself for large or
// chunked uploads. Through the agent-proxy every status must reach the
// caller unchanged with that header — never 100 Continue then 200 OK with
// an error body — on every error path of the real pod and of the API.
func TestWebhookExpectContinueKeepsEveryStatus(t *testing.T) {
	t.Parallel()
	w, _ := webhookWorld(t, "SVC_POD_WEBHOOK_SYNC_TIMEOUT=1s", "SVC_POD_WEBHOOK_MAX_BODY_BYTES=300")
	gate := make(chan struct{})
	defer close(gate)
	w.e.upstream.Script(agentScript("slow.txt", "slow", "too late", gate))
	client := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: 10 * time.Second}}
	url := w.api.URL + "/api/projects/" + w.project + "/agent-proxy/agent/channels/webhook/incoming"
	big := `{"message":"` + strings.Repeat("x", 1000) + `"}`
	cases := []struct {
		name, key, secret, body string
		chunked                 bool
		status                  int
		code                    string
	}{
		{"missing message", w.acc.key, "hook-secret", `{"senderId":"a"}`, false, 400, "missing_message"},
		{"message not a string, chunked", w.acc.key, "hook-secret", `{"message":42}`, true, 400, "invalid_message"},
		{"wrong channel secret", w.acc.key, "nope", `{"message":"x"}`, false, 401, "invalid_webhook_secret"},
		{"body too large", w.acc.key, "hook-secret", big, false, 413, "request_too_large"},
		{"body too large, chunked", w.acc.key, "hook-secret", big, true, 413, "request_too_large"},
		{"cloud auth fails", "svc_sk_nope", "hook-secret", `{"message":"x"}`, false, 401, "invalid_api_key"},
		{"reply timeout", w.acc.key, "hook-secret", `{"message":"slow job"}`, true, 504, "reply_timeout"},
	}
	for _, tc := range cases {
		var body io.Reader = bytes.NewReader([]byte(tc.body))
		if tc.chunked {
			body = io.MultiReader(strings.NewReader(tc.body)) // unknown length: chunked
		}
		req, err := http.NewRequest(http.MethodPost, url, body)
		must(t, err)
		req.Header.Set("Authorization", "Bearer "+tc.key)
		req.Header.Set("X-Webhook-Secret", tc.secret)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Expect", "100-continue")
		res, err := client.Do(req)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, res.StatusCode, b, tc.status)
			continue
		}
		if code := errCode(t, b); code != tc.code {
			t.Errorf("%s: code %q, want %q (%s)", tc.name, code, tc.code, b)
		}
	}
}
