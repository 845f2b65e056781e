package server_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/apikey"
	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/server"
	"github.com/svc-dev/svc/apiserver/internal/server/servertest"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/apiserver/internal/upstream"
	"github.com/svc-dev/svc/shared/testenv/fakeupstream"
)

// BenchmarkGovernedInProcess is one completion through the whole in-process
// server with every governance feature of BenchmarkGovernedBoard on (an API
// key, a credit budget on the key, plan rate limits and a usage window, a
// priced model so usage and settlements carry credits, metering and the
// metrics): ns/op and allocs/op of the governed request path, for CPU and
// allocation profiles (-cpuprofile, -memprofile) that a loaded machine
// does not blur as it does the board's wall-clock figures.
func BenchmarkGovernedInProcess(b *testing.B) {
	srv, acc, _ := governedServer(b)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for _, bc := range []struct {
		name   string
		stream bool
	}{{"plain", false}, {"stream", true}} {
		body := fmt.Sprintf(`{"model":"svc-2-0","stream":%v,"messages":[{"role":"user","content":"benchmark request body"}]}`, bc.stream)
		do := func() (http.Header, error) {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+acc.Key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			if err != nil {
				return nil, err
			}
			defer resp.Body.Close()
			if bc.stream {
				br := bufio.NewReader(resp.Body)
				for {
					line, err := br.ReadSlice('\n')
					if bytes.HasPrefix(line, []byte("data: [DONE]")) {
						break
					}
					if err != nil {
						return nil, fmt.Errorf("stream ended without [DONE]: %w", err)
					}
				}
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Ratelimit-Limit-Requests") == "" {
				return nil, fmt.Errorf("status %d, rate-limit headers %q", resp.StatusCode, resp.Header.Get("X-Ratelimit-Limit-Requests"))
			}
			return resp.Header, nil
		}
		// Warm: connections, the key's cache, its budget estimate and lease.
		for range 50 {
			if _, err := do(); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := do(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
		// The gateway's own account (Server-Timing) of one client's requests,
		// back to back and after an idle gap such as the board's interleaved
		// lanes leave between two of the gateway's requests: the p50 of its
		// auth and overhead phases, in µs. A taken-over stream's connection
		// comes back to net/http on a fresh goroutine whose stack grows on
		// the next request's first deep call (the key lookup, so inside
		// "auth"); the plain lane keeps its goroutine and is the control.
		for _, gap := range []time.Duration{0, 30 * time.Millisecond} {
			b.Run(fmt.Sprintf("%s-timing/gap=%v", bc.name, gap), func(b *testing.B) {
				var auth, admit, overhead []float64
				for b.Loop() {
					if gap > 0 {
						b.StopTimer()
						time.Sleep(gap) // the idle gap measured, not a synchronisation
						b.StartTimer()
					}
					h, err := do()
					if err != nil {
						b.Fatal(err)
					}
					a, ok := serverTiming(h.Get("Server-Timing"), "auth")
					ad, ok2 := serverTiming(h.Get("Server-Timing"), "admit")
					o, err := strconv.ParseFloat(h.Get("X-Svc-Overhead-Duration-Ms"), 64)
					if !ok || !ok2 || err != nil {
						b.Fatalf("Server-Timing %q, overhead %q", h.Get("Server-Timing"), h.Get("X-Svc-Overhead-Duration-Ms"))
					}
					auth, admit, overhead = append(auth, a*1000), append(admit, ad*1000), append(overhead, o*1000)
				}
				b.ReportMetric(median(auth), "auth-µs")
				b.ReportMetric(median(overhead), "overhead-µs")
				// The 99th percentiles show the requests that waited for
				// the database (a key's row or a workspace's windows read
				// on the request path).
				b.ReportMetric(quantile(auth, 0.99), "auth-p99-µs")
				b.ReportMetric(quantile(admit, 0.99), "admit-p99-µs")
			})
		}
	}
}

// governedServer is the in-process server with every governance feature of
// BenchmarkGovernedBoard on, its account (key with a budget) and the fake
// upstream behind it.
func governedServer(b *testing.B) (*servertest.Server, servertest.Account, *fakeupstream.Server) {
	up := fakeupstream.New(b)
	dir := b.TempDir()
	models, plans := filepath.Join(dir, "models.yaml"), filepath.Join(dir, "plans.yaml")
	must := func(err error) {
		b.Helper()
		if err != nil {
			b.Fatal(err)
		}
	}
	must(os.WriteFile(models, fmt.Appendf(nil, `providers:
  - {name: main, type: openai, base_url: %q}
models:
  - {id: svc-2-0, tier: standard, created: 1700000000, reasoning_effort: medium,
     price: {input_per_mtok: 3, output_per_mtok: 15}, deployments: [{provider: main, upstream_model: up-2}]}
`, up.BaseURL()), 0o600))
	must(os.WriteFile(plans, []byte(`plans:
  - {name: free, tiers: [standard], rpm: 1000000000, workspace_rpm: 1000000000,
     windows: [{name: 5h, duration: 5h, credits: 1000000000}]}
`), 0o600))
	cat, err := catalog.Load(catalog.Options{ModelsFile: models, PlansFile: plans})
	must(err)
	db := storetest.Postgres(b)
	srv := servertest.New(b, server.Deps{Store: db, Catalog: cat, Upstream: upstream.New(upstream.Options{})})
	acc := servertest.NewAccount(b, db)
	keyID, _, ok := apikey.Parse(acc.Key)
	if !ok {
		b.Fatal("the account's key does not parse")
	}
	must(db.SetKeyBudget(context.Background(), keyID, 1_000_000_000_000_000, "monthly"))
	return srv, acc, up
}

// serverTiming returns the duration (ms) of the Server-Timing entry name.
func serverTiming(h, name string) (float64, bool) {
	for e := range strings.SplitSeq(h, ",") {
		n, dur, ok := strings.Cut(strings.TrimSpace(e), ";dur=")
		if ok && n == name {
			v, err := strconv.ParseFloat(dur, 64)
			return v, err == nil
		}
	}
	return 0, false
}

func median(v []float64) float64 { return quantile(v, 0.5) }

// quantile returns the q-quantile of v (sorting v).
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[int(q*float64(len(v)-1)+0.5)]
}
