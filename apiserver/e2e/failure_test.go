package e2e

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/svc-dev/svc/shared/testenv"
)

// In fail-closed mode, with the database gone, the API refuses with a
// clear 503 and /readyz says so; nothing reaches the upstream; once the
// database is back the same key works and its usage is recorded. (The
// default serve mode: TestDatabaseOutageServesKnownKeys.)
func TestDatabaseDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	acc := e.account("free")
	u, err := url.Parse(e.dbURL)
	must(t, err)
	proxy := testenv.NewFaultProxy(t, u.Host)
	direct := e.dbURL
	e.dbURL, err = proxy.RewriteURL(direct)
	must(t, err)
	a := e.startAPI("SVC_DB_OUTAGE_MODE=fail-closed")
	e.dbURL = direct // the admin CLI keeps the direct connection
	c := client(a.URL+"/v1", acc.key)
	if _, err := c.Chat.Completions.New(context.Background(), userMsg("warm")); err != nil {
		t.Fatal(err)
	}
	waitUsage(t, e, acc.workspace, 1)
	before := len(e.upstream.Requests())

	proxy.SetDown(true)
	// Twice: once while the key may still be cached, once after the cache
	// (500 ms) must have expired, so both the key lookup and admission fail.
	var ae *openai.Error
	for i, wait := range []time.Duration{0, 600 * time.Millisecond} {
		time.Sleep(wait) // let the key cache expire (not synchronisation)
		_, err = c.Chat.Completions.New(context.Background(), userMsg("while down"))
		if !errors.As(err, &ae) || ae.StatusCode != 503 || ae.Type != "server_error" || ae.Code != "service_unavailable" {
			t.Fatalf("database down (%d): got %v, want 503 server_error service_unavailable", i, err)
		}
		if ae.Response.Header.Get("Retry-After") == "" {
			t.Fatal("503 without Retry-After")
		}
	}
	if strings.Contains(ae.Message, "dial") || strings.Contains(ae.Message, "127.0.0.1") {
		t.Fatalf("internal details leaked: %q", ae.Message)
	}
	if resp, err := http.Get(a.URL + "/readyz"); err != nil || resp.StatusCode != 503 {
		t.Fatalf("/readyz while the database is down: %v %v", resp, err)
	}
	if len(e.upstream.Requests()) != before {
		t.Fatal("a request reached the upstream without admission")
	}

	proxy.SetDown(false)
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := c.Chat.Completions.New(context.Background(), userMsg("after"))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API did not recover: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // reconnect poll with a deadline
	}
	if got := waitUsage(t, e, acc.workspace, 2); got.requests != 2 {
		t.Fatalf("usage after recovery: %+v (want the warm-up and the request after recovery)", got)
	}
}

// /metrics exposes the gateway series and /healthz answers.
func TestHealthAndMetrics(t *testing.T) {
	t.Parallel()
	_, a, acc := freeAccount(t)
	if _, err := client(a.URL+"/v1", acc.key).Chat.Completions.New(context.Background(), userMsg("x")); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{"/healthz": `"ok"`, "/metrics": "svc_completion_duration_seconds_count"} {
		resp, err := http.Get(a.URL + path)
		must(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Errorf("%s: %d, missing %q", path, resp.StatusCode, want)
		}
	}
}
