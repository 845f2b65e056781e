package upstream

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/shared/testenv/fakeupstream"
)

func TestKeyPoolWeightedRotationAndCooldown(t *testing.T) {
	t.Parallel()
	p := newKeyPool(catalog.Provider{APIKeys: []catalog.APIKey{
		{Name: "a", Value: "va", Weight: 3}, {Name: "b", Value: "vb", Weight: 1}}})
	now := time.Unix(1000, 0)
	var seq []string
	for range 8 {
		k, _ := p.pick(now)
		seq = append(seq, k.name)
	}
	// Smooth weighted round-robin: b is spread out, never bunched.
	if got := strings.Join(seq, ""); got != "aabaaaba" && got != "abaaabaa" && got != "aaba"+"aaba" {
		t.Fatalf("rotation %s, want a:b = 3:1 interleaved", got)
	}
	a := p.keys[0]
	if !p.cooldown(a, now, now.Add(time.Minute)) || p.cooldown(a, now, now.Add(time.Second)) {
		t.Fatal("the first cooldown counts, a second one during it does not")
	}
	for range 3 {
		if k, _ := p.pick(now.Add(time.Second)); k.name != "b" {
			t.Fatalf("picked %s while a cools down", k.name)
		}
	}
	b := p.keys[1]
	p.cooldown(b, now, now.Add(30*time.Second))
	if k, soonest := p.pick(now.Add(time.Second)); k != nil || !soonest.Equal(now.Add(30*time.Second)) {
		t.Fatalf("all cooling: %v, soonest %v", k, soonest)
	}
	if k, _ := p.pick(now.Add(61 * time.Second)); k == nil {
		t.Fatal("keys come back after their cooldown")
	}
}

type fixture struct {
	a, b *fakeupstream.Server
	cat  *catalog.Catalog
	r    *Router
	reg  *prometheus.Registry
}

// newFixture: model m with deployments a/up-a (keys k1, k2) then b/up-b.
func newFixture(t *testing.T, o RouterOptions) *fixture {
	t.Helper()
	f := &fixture{a: fakeupstream.New(t), b: fakeupstream.New(t), reg: prometheus.NewRegistry()}
	f.cat = &catalog.Catalog{Providers: map[string]catalog.Provider{
		"a": {Name: "a", Type: "openai", BaseURL: f.a.BaseURL(), APIKeys: []catalog.APIKey{
			{Name: "k1", Value: "secret-one", Weight: 1}, {Name: "k2", Value: "secret-two", Weight: 1}}},
		"b": {Name: "b", Type: "openai", BaseURL: f.b.BaseURL(), APIKey: "secret-b"},
	}, Models: []catalog.Model{{ID: "m", Deployments: []catalog.Deployment{
		{Provider: "a", UpstreamModel: "up-a"}, {Provider: "b", UpstreamModel: "up-b"}}}}}
	o.Registerer = f.reg
	if o.BackoffBase == 0 {
		o.BackoffBase, o.BackoffMax = time.Millisecond, 5*time.Millisecond
	}
	f.r = NewRouter(New(Options{HeaderTimeout: 300 * time.Millisecond}), f.cat, o)
	return f
}

func (f *fixture) send(t *testing.T) (Answer, string, error) {
	t.Helper()
	a, err := f.r.Send(context.Background(), &f.cat.Models[0], func(d *catalog.Deployment) ([]byte, error) {
		return fmt.Appendf(nil, `{"model":%q,"messages":[{"role":"user","content":"hi"}]}`, d.UpstreamModel), nil
	})
	body := ""
	if a.Resp != nil {
		b, _ := io.ReadAll(a.Resp.Body)
		a.Resp.Body.Close()
		body = string(b)
	}
	return a, body, err
}

// Each failure of the first deployment before any byte moves the request to
// the second one; a 400 is the request's fault and is not retried.
func TestRouterFallbacks(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		fakeupstream.Condition
		wantDep   string
		wantA     int // requests the first upstream saw
		wantCode  int
		keyCooled bool
	}{
		{name: "ok", Condition: fakeupstream.Condition{Reply: fakeupstream.Reply{Text: "x"}}, wantDep: "a/up-a", wantA: 1, wantCode: 200},
		{name: "down", Condition: fakeupstream.Condition{Down: true}, wantDep: "b/up-b", wantA: 0, wantCode: 200},
		{name: "500", Condition: fakeupstream.Condition{Reply: fakeupstream.Reply{Status: 500}}, wantDep: "b/up-b", wantA: 1, wantCode: 200},
		{name: "429 cools the key", Condition: fakeupstream.Condition{Reply: fakeupstream.Reply{Status: 429, RetryAfter: "30"}}, wantDep: "b/up-b", wantA: 2, wantCode: 200, keyCooled: true},
		{name: "401 cools the key", Condition: fakeupstream.Condition{Reply: fakeupstream.Reply{Status: 401}}, wantDep: "b/up-b", wantA: 2, wantCode: 200, keyCooled: true},
		{name: "stall before headers", Condition: fakeupstream.Condition{Reply: fakeupstream.Reply{Stall: true}}, wantDep: "b/up-b", wantA: 1, wantCode: 200},
		{name: "400 is not retried", Condition: fakeupstream.Condition{Reply: fakeupstream.Reply{Status: 400}}, wantDep: "a/up-a", wantA: 1, wantCode: 400},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, RouterOptions{})
			tc.Condition.Apply(f.a)
			a, _, err := f.send(t)
			if err != nil {
				t.Fatal(err)
			}
			if a.Resp.StatusCode != tc.wantCode || a.Deployment.Name() != tc.wantDep {
				t.Fatalf("answer %d from %s, want %d from %s", a.Resp.StatusCode, a.Deployment.Name(), tc.wantCode, tc.wantDep)
			}
			if n := len(f.a.Requests()); n != tc.wantA {
				t.Fatalf("first upstream saw %d requests, want %d", n, tc.wantA)
			}
			if tc.wantA == 2 { // both keys of a were tried, each once
				k := []string{f.a.Requests()[0].Header.Get("Authorization"), f.a.Requests()[1].Header.Get("Authorization")}
				if k[0] == k[1] {
					t.Fatalf("the same key twice: %v", k)
				}
			}
			cooled := testutil.ToFloat64(f.r.m.keyCooldowns.WithLabelValues("a", "k1")) +
				testutil.ToFloat64(f.r.m.keyCooldowns.WithLabelValues("a", "k2"))
			if (cooled > 0) != tc.keyCooled {
				t.Fatalf("key cooldowns %v, want %v", cooled, tc.keyCooled)
			}
			if got := len(f.b.Requests()); (tc.wantDep == "b/up-b") != (got == 1) {
				t.Fatalf("second upstream saw %d requests", got)
			}
			if tc.wantDep == "b/up-b" && f.b.Requests()[0].Body["model"] != "up-b" {
				t.Fatalf("second upstream got model %v", f.b.Requests()[0].Body["model"])
			}
		})
	}
}

// Attempts are bounded: with both deployments failing the last failure is
// handed back after MaxAttempts requests.
func TestRouterBoundedAttempts(t *testing.T) {
	t.Parallel()
	f := newFixture(t, RouterOptions{MaxAttempts: 3})
	f.a.Sequence(fakeupstream.Reply{Status: 503})
	f.b.Sequence(fakeupstream.Reply{Status: 502})
	a, _, err := f.send(t)
	if err != nil {
		t.Fatal(err)
	}
	if a.Attempts != 3 || a.Resp.StatusCode != 502 && a.Resp.StatusCode != 503 {
		t.Fatalf("attempts %d, status %d", a.Attempts, a.Resp.StatusCode)
	}
	if total := len(f.a.Requests()) + len(f.b.Requests()); total != 3 {
		t.Fatalf("%d upstream requests, want 3", total)
	}
}

// A deployment failing BreakerFailures times in a row is skipped until its
// cooldown ends, then probed again.
func TestRouterCircuitBreaker(t *testing.T) {
	t.Parallel()
	f := newFixture(t, RouterOptions{BreakerFailures: 2, BreakerCooldown: 200 * time.Millisecond})
	f.a.Sequence(fakeupstream.Reply{Status: 500}, fakeupstream.Reply{Status: 500}, fakeupstream.Reply{Text: "back"})
	for i := range 2 {
		if a, _, _ := f.send(t); a.Deployment.Name() != "b/up-b" {
			t.Fatalf("request %d answered by %s", i, a.Deployment.Name())
		}
	}
	if got := testutil.ToFloat64(f.r.m.depCooldowns.WithLabelValues("a/up-a")); got != 1 {
		t.Fatalf("deployment cooldowns %v, want 1", got)
	}
	if a, _, _ := f.send(t); a.Deployment.Name() != "b/up-b" || len(f.a.Requests()) != 2 {
		t.Fatalf("an open breaker is skipped: answered by %s, a saw %d", a.Deployment.Name(), len(f.a.Requests()))
	}
	deadline := time.Now().Add(5 * time.Second)
	for f.r.deps["a/up-a"].breaker.State().String() == "open" && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // waits for the cooldown the test configured, not for a goroutine
	}
	if a, _, _ := f.send(t); a.Deployment.Name() != "a/up-a" {
		t.Fatalf("after the cooldown the probe goes to a; answered by %s", a.Deployment.Name())
	}
}

// Metrics name deployments and keys, never a key's value.
func TestRouterMetricsNeverShowKeys(t *testing.T) {
	t.Parallel()
	f := newFixture(t, RouterOptions{})
	f.a.Sequence(fakeupstream.Reply{Status: 429}, fakeupstream.Reply{Text: "ok"})
	for range 2 {
		if _, _, err := f.send(t); err != nil {
			t.Fatal(err)
		}
	}
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		fmt.Fprintln(&b, mf.String())
	}
	text := b.String()
	for _, secret := range []string{"secret-one", "secret-two", "secret-b"} {
		if strings.Contains(text, secret) {
			t.Fatalf("metrics show a key value %q", secret)
		}
	}
	if got := testutil.ToFloat64(f.r.m.requests.WithLabelValues("a/up-a", "k1", "rate_limited")); got != 1 {
		t.Fatalf("rate_limited on a/k1 = %v", got)
	}
	if got := testutil.ToFloat64(f.r.m.requests.WithLabelValues("a/up-a", "k2", "ok")); got != 2 {
		t.Fatalf("ok on a/k2 = %v (k1 cools down after its 429)", got)
	}
}

// A model with one deployment has no alternative: its breaker and key
// cooldowns never refuse a request, a 429 reaches the caller with its
// Retry-After, and a stalled deployment is not waited for twice.
func TestRouterLoneDeployment(t *testing.T) {
	t.Parallel()
	f := newFixture(t, RouterOptions{BreakerFailures: 1})
	lone := catalog.Model{ID: "one", Deployments: []catalog.Deployment{{Provider: "b", UpstreamModel: "up-b"}}}
	f.cat.Models = append(f.cat.Models, lone)
	f.r = NewRouter(New(Options{HeaderTimeout: 300 * time.Millisecond}), f.cat, RouterOptions{BreakerFailures: 1,
		BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond})
	send := func() Answer {
		a, err := f.r.Send(context.Background(), &lone, func(d *catalog.Deployment) ([]byte, error) {
			return []byte(`{"model":"up-b","messages":[{"role":"user","content":"hi"}]}`), nil
		})
		if err != nil && !strings.Contains(err.Error(), "timed out") {
			t.Fatal(err)
		}
		if a.Resp != nil {
			io.Copy(io.Discard, a.Resp.Body)
			a.Resp.Body.Close()
		}
		return a
	}
	f.b.Sequence(fakeupstream.Reply{Status: 429, RetryAfter: "7"}, fakeupstream.Reply{Status: 500}, fakeupstream.Reply{Text: "ok"})
	if a := send(); a.Resp.StatusCode != 429 || a.Attempts != 1 || a.Resp.Header.Get("Retry-After") != "7" {
		t.Fatalf("429: %d after %d attempts", a.Resp.StatusCode, a.Attempts)
	}
	// Its only key cools down, the breaker opens after the 500: both are
	// ignored, and the retry answers.
	if a := send(); a.Resp == nil || a.Resp.StatusCode != 200 || a.Attempts != 2 {
		t.Fatalf("after a cooldown: %+v", a)
	}
	f.b.Sequence(fakeupstream.Reply{Stall: true})
	before := len(f.b.Requests())
	if a := send(); a.Attempts != 1 || len(f.b.Requests()) != before+1 {
		t.Fatalf("a stall was retried: %d attempts", a.Attempts)
	}
}

func TestDevContentParts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		content any
		want    string
	}{
		{"plain", "plain"},
		{[]any{map[string]any{"type": "text", "text": "a"}, map[string]any{"type": "image_url"}, map[string]any{"type": "text", "text": "b"}}, "a b"},
		{nil, ""},
	} {
		if got := contentText(tc.content); got != tc.want {
			t.Errorf("contentText(%v) = %q, want %q", tc.content, got, tc.want)
		}
	}
}
