package e2e

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/testenv/testhttp"
)

// BenchmarkWebhookProxyOverhead measures what the agent-proxy adds to a
// webhook request (cloud auth on Postgres, the runtime lookup, the forward
// and the copy back): the same incoming POST sent straight to a running agent
// (the test agent, which answers at once) and through a real apiserver.
// Reported: p50/p99 of both paths and the added p50/p99 (target of the issue:
// sync overhead ≤ 5 ms p50).
func BenchmarkWebhookProxyOverhead(b *testing.B) {
	e := newEnv(b)
	dataDir := b.TempDir()
	a := e.startAPI("SVC_PODAGENT_BIN="+fakeAgentBin(b), "SVC_DATA_DIR="+dataDir, "SVC_LOG_LEVEL=error")
	acc := e.account("bench")
	project := e.admin("project", "create", "--workspace", acc.workspace, "--name", "bench")["id"].(string)
	// The API checks the channel secret before it routes: without one every
	// message would be a 401 at the edge.
	e.admin("channel", "set", "--project", project, "--secret", "bench-secret")
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	body := []byte(`{"message":"benchmark","senderId":"bench","metadata":{"k":"v"}}`)
	send := func(url, auth string) time.Duration {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Webhook-Secret", "bench-secret")
		req.Header.Set("Authorization", "Bearer "+auth)
		d, err := testhttp.Timed(hc, req)
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
	proxied := a.URL + "/api/projects/" + project + "/agent-proxy/agent/channels/webhook/incoming"
	send(proxied, acc.key) // cold start
	info := fakeAgentInfoOf(b, a.URL, project, acc.key)
	direct := "http://" + info.Env["SVC_HTTP_ADDR"] + "/agent/channels/webhook/incoming"
	token := info.Env["SVC_RUNTIME_TOKEN"]
	n := max(b.N, 300)
	for i := 0; i < 100; i++ { // warm connections, statements, caches
		send(direct, token)
		send(proxied, acc.key)
	}
	b.ResetTimer()
	d, p := make([]time.Duration, n), make([]time.Duration, n)
	for i := 0; i < n; i++ { // interleaved, so both paths see the same machine load
		d[i] = send(direct, token)
		p[i] = send(proxied, acc.key)
	}
	b.StopTimer()
	b.ReportMetric(us(pct(d, 50)), "direct-p50-µs")
	b.ReportMetric(us(pct(p, 50)), "proxied-p50-µs")
	b.ReportMetric(us(pct(p, 50)-pct(d, 50)), "added-p50-µs")
	b.ReportMetric(us(pct(p, 99)-pct(d, 99)), "added-p99-µs")
	b.Logf("n=%d direct p50=%v p99=%v; proxied p50=%v p99=%v", n, pct(d, 50), pct(d, 99), pct(p, 50), pct(p, 99))
}
