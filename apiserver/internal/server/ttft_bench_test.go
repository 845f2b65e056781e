package server_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime/trace"
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkGovernedFirstToken is the board's stream figure in one process:
// one client opens a stream at a time, in turn straight to the fake
// upstream, through a bare reverse proxy (net/http/httputil, flushing every
// write) and through the governed server (governedServer), with an idle gap
// before each, as the board's interleaved lanes leave one. It reports each
// lane's p50 time to the first content frame minus the direct lane's
// (added-µs) and the gateway's minus the proxy's (gateway-minus-proxy-µs),
// the board's goal being ≤ 100 µs. Run with -trace: each gateway stream is
// a trace task ("gateway-stream"), so the goroutine switches and system
// calls between its request and its first frame can be listed.
func BenchmarkGovernedFirstToken(b *testing.B) {
	srv, acc, up := governedServer(b)
	upURL, err := url.Parse(up.BaseURL())
	if err != nil {
		b.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(upURL)
	rp.FlushInterval = -1
	proxy := httptest.NewServer(http.StripPrefix("/v1", rp))
	b.Cleanup(proxy.Close)
	body := `{"model":"svc-2-0","stream":true,"messages":[{"role":"user","content":"benchmark request body"}]}`
	upBody := strings.Replace(body, "svc-2-0", "up-2", 1)
	lanes := []struct{ name, url, body string }{
		{"direct", up.BaseURL() + "/chat/completions", upBody},
		{"proxy", proxy.URL + "/v1/chat/completions", upBody},
		{"gateway", srv.URL + "/v1/chat/completions", body},
	}
	clients := make([]*http.Client, len(lanes))
	for i := range clients {
		clients[i] = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	}
	once := func(i int) (time.Duration, error) {
		l := lanes[i]
		ctx := context.Background()
		if l.name == "gateway" {
			var task *trace.Task
			ctx, task = trace.NewTask(ctx, "gateway-stream")
			defer task.End()
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, l.url, strings.NewReader(l.body))
		req.Header.Set("Authorization", "Bearer "+acc.Key)
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := clients[i].Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		first := time.Duration(0)
		for {
			line, err := br.ReadSlice('\n')
			if first == 0 && bytes.Contains(line, []byte(`"content":"`)) {
				first = time.Since(start)
				trace.Log(ctx, "first-token", l.name)
			}
			if err != nil {
				break
			}
		}
		if resp.StatusCode != http.StatusOK || first == 0 {
			return 0, fmt.Errorf("%s: status %d, no content frame", l.name, resp.StatusCode)
		}
		return first, nil
	}
	for range 20 { // warm every lane's connections and the key's caches
		for i := range lanes {
			if _, err := once(i); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, gap := range []time.Duration{0, 30 * time.Millisecond} {
		b.Run(fmt.Sprintf("gap=%v", gap), func(b *testing.B) {
			ttft := make([][]time.Duration, len(lanes))
			for b.Loop() {
				for i := range lanes {
					if gap > 0 {
						time.Sleep(gap) // the idle gap measured, not a synchronisation
					}
					d, err := once(i)
					if err != nil {
						b.Fatal(err)
					}
					ttft[i] = append(ttft[i], d)
				}
			}
			p50 := make([]float64, len(lanes))
			for i := range ttft {
				slices.Sort(ttft[i])
				p50[i] = float64(ttft[i][len(ttft[i])/2]) / float64(time.Microsecond)
			}
			b.ReportMetric(p50[1]-p50[0], "proxy-added-µs")
			b.ReportMetric(p50[2]-p50[0], "gateway-added-µs")
			b.ReportMetric(p50[2]-p50[1], "gateway-minus-proxy-µs")
		})
	}
}

// BenchmarkGovernedLane drives streamed requests, one at a time, through one
// lane of BenchmarkGovernedFirstToken (lane=direct, lane=proxy or
// lane=gateway), read to their end: the per-request CPU work of a lane
// without a clock, for instruction counts under valgrind (callgrind,
// cachegrind: run it at two -benchtime counts and divide the difference by
// the count's difference) and for -benchmem's allocations, which a loaded
// machine does not blur as it does the wall-clock figures.
func BenchmarkGovernedLane(b *testing.B) {
	srv, acc, up := governedServer(b)
	upURL, err := url.Parse(up.BaseURL())
	if err != nil {
		b.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(upURL)
	rp.FlushInterval = -1
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 4}
	proxy := httptest.NewServer(http.StripPrefix("/v1", rp))
	b.Cleanup(proxy.Close)
	body := `{"model":"svc-2-0","stream":true,"messages":[{"role":"user","content":"benchmark request body"}]}`
	upBody := strings.Replace(body, "svc-2-0", "up-2", 1)
	for _, l := range []struct{ name, url, body string }{
		{"direct", up.BaseURL() + "/chat/completions", upBody},
		{"proxy", proxy.URL + "/v1/chat/completions", upBody},
		{"gateway", srv.URL + "/v1/chat/completions", body},
	} {
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
		once := func() error {
			req, _ := http.NewRequest(http.MethodPost, l.url, strings.NewReader(l.body))
			req.Header.Set("Authorization", "Bearer "+acc.Key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			n, err := io.Copy(io.Discard, resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK || !bytes.Contains([]byte(resp.Header.Get("Content-Type")), []byte("text/event-stream")) || n == 0 {
				return fmt.Errorf("%s: status %d, %d bytes, %v", l.name, resp.StatusCode, n, err)
			}
			return nil
		}
		b.Run("lane="+l.name, func(b *testing.B) {
			// The bare proxy now and then cuts a stream (its upstream
			// connection closed under the body's copy): counted, not fatal.
			cut := 0
			try := func() {
				err := once()
				if err != nil && l.name == "proxy" && strings.Contains(err.Error(), "unexpected EOF") {
					cut++
				} else if err != nil {
					b.Fatal(err)
				}
			}
			for range 20 { // connections, the key's caches
				try()
			}
			b.ReportAllocs()
			for b.Loop() {
				try()
			}
			b.ReportMetric(float64(cut), "cut-streams")
		})
	}
}
