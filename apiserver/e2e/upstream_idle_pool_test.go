package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/testenv"
)

// The idle upstream pool is bounded: after a burst of
// streams, each of which held an upstream connection of its own, at most
// SVC_UPSTREAM_MAX_IDLE_CONNS_PER_HOST connections stay open to the upstream
// (it counts them), and after SVC_UPSTREAM_IDLE_CONN_TIMEOUT none does: the
// process's goroutines and live heap come back to within 5 % of their idle
// baseline. A leak of anything per stream (a goroutine, a connection, a
// buffer) keeps them above it. The live heap is read after collections, not
// the in-use spans: a span with one long-lived object stays in use, so the
// spans a burst touched need not come back (CI once saw 13 % more span bytes
// and equal goroutines). Goroutines may be 2 above the baseline: the
// database driver's background reader of a connection (pgx) comes and goes
// with the connection's last use, and 5 % of ~18 is less than one; a leak
// per stream is 100 of them. While the streams are held, each costs at most two
// goroutines (point 3; an HTTP/1.1 client and upstream: one, the relay).
func TestUpstreamIdlePool(t *testing.T) {
	t.Parallel()
	const streams = 100
	for _, tc := range []struct {
		name string
		env  []string
		// conns is how many upstream connections may stay open once the
		// streams ended and the pool settled.
		conns   int64
		settled func(base, now memSample) bool
		want    string
	}{
		{name: "bounded per host", env: []string{"SVC_UPSTREAM_MAX_IDLE_CONNS_PER_HOST=4", "SVC_UPSTREAM_IDLE_CONN_TIMEOUT=1h"},
			conns:   4,
			settled: func(base, now memSample) bool { return now.goroutines <= base.goroutines+2 },
			want:    "goroutines ≤ baseline + 2"},
		{name: "idle timeout", env: []string{"SVC_UPSTREAM_IDLE_CONN_TIMEOUT=1s"},
			conns: 0,
			settled: func(base, now memSample) bool {
				return now.goroutines <= max(base.goroutines+2, base.goroutines*105/100) && float64(now.live) <= 1.05*float64(base.live)
			},
			want: "goroutines within 5 % (or 2) and live heap within 5 % of the idle baseline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := newBenchUpstream(t, 2, 0)
			e := newEnv(t)
			must(t, writeModelsFor(e, up.BaseURL()))
			port, err := testenv.FreePort()
			must(t, err)
			pprofAddr := fmt.Sprintf("127.0.0.1:%d", port)
			// Four database connections: the first burst opens them all,
			// so the baseline already holds what the database pool keeps.
			a := e.startAPI(append([]string{"SVC_PPROF_ADDR=" + pprofAddr, "SVC_DATABASE_MAX_CONNS=4"}, tc.env...)...)
			acc := e.account("bench")
			figures := func() memSample { return memFigures(t, a.URL, pprofAddr) }
			fresh := figures()
			pooled := func() bool { return up.open.Load() <= tc.conns }

			// A first burst grows what is pooled on purpose (database
			// connections); the idle baseline is taken once its upstream
			// connections are gone, or down to the bound.
			burst(t, up, a.URL, acc.key, streams, figures)
			base := pollFigures(t, figures, func(m memSample) bool { return pooled() && m.goroutines <= fresh.goroutines+2 })
			if !pooled() {
				t.Fatalf("after the first burst: %d upstream connections open, want ≤ %d", up.open.Load(), tc.conns)
			}

			var open int64
			held := burst(t, up, a.URL, acc.key, streams, func() memSample { open = up.open.Load(); return figures() })
			if open < streams {
				t.Fatalf("%d held streams: %d upstream connections open: the streams were not open together", streams, open)
			}
			if per := float64(held.goroutines-base.goroutines) / streams; per > 2 {
				t.Fatalf("%d held streams: %.2f goroutines per stream, want ≤ 2", streams, per)
			}
			last := pollFigures(t, figures, func(m memSample) bool { return pooled() && tc.settled(base, m) })
			if !pooled() || !tc.settled(base, last) {
				t.Logf("the apiserver's goroutines:\n%s", pprofText(t, pprofAddr, "goroutine?debug=1"))
				t.Fatalf("after the streams ended: %d upstream connections open (want ≤ %d); %d goroutines, live heap %d B; idle baseline %d goroutines, live heap %d B; want %s",
					up.open.Load(), tc.conns, last.goroutines, last.live, base.goroutines, base.live, tc.want)
			}
		})
	}
}

// writeModelsFor points e's models file at one upstream.
func writeModelsFor(e *env, base string) error {
	return os.WriteFile(e.models, fmt.Appendf(nil, `providers:
  - {name: main, type: openai, base_url: %q, api_key_env: FAKE_UPSTREAM_KEY}
models:
  - {id: svc-2-0, tier: standard, provider: main, upstream_model: up-2, price: {input_per_mtok: 3, output_per_mtok: 15}}
`, base), 0o600)
}

// pollFigures reads the figures until ok or 60 s have passed; it returns
// the last ones read.
func pollFigures(t *testing.T, figures func() memSample, ok func(memSample) bool) memSample {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		m := figures()
		if ok(m) || time.Now().After(deadline) {
			return m
		}
		time.Sleep(200 * time.Millisecond) // a poll interval, not a synchronisation
	}
}

// burst opens n streams held by the upstream after their first frame,
// reads the apiserver's figures while all are open, then releases and
// reads them to the end.
func burst(t *testing.T, up *benchUpstream, apiURL, key string, n int, figures func() memSample) memSample {
	t.Helper()
	body := []byte(`{"model":"svc-2-0","stream":true,"messages":[{"role":"user","content":"hold the stream"}]}`)
	tr := &http.Transport{MaxIdleConnsPerHost: n}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	opened := make(chan error, n)
	bodies := make(chan io.ReadCloser, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := post(hc, apiURL+"/v1/chat/completions", key, body)
			if err != nil {
				opened <- err
				return
			}
			line, err := bufio.NewReader(resp.Body).ReadString('\n')
			if err == nil && !strings.HasPrefix(line, "data: {") {
				err = fmt.Errorf("first line %q", line)
			}
			opened <- err
			bodies <- resp.Body
		}()
	}
	var firstErr error
	for i := 0; i < n; i++ {
		if err := <-opened; err != nil && firstErr == nil {
			firstErr = err
		}
	}
	var during memSample
	if firstErr == nil {
		during = figures()
	}
	up.release()
	wg.Wait()
	close(bodies)
	for rc := range bodies {
		_, _ = io.Copy(io.Discard, rc)
		rc.Close()
	}
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	return during
}

// pprofText is one of the apiserver's pprof pages (path after
// /debug/pprof/), for a failure's log.
func pprofText(t *testing.T, pprofAddr, path string) string {
	t.Helper()
	resp, err := http.Get("http://" + pprofAddr + "/debug/pprof/" + path)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
