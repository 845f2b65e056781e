package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/testenv/fakeupstream"
)

// BenchmarkStreamMemory measures the apiserver's memory per open stream
// (at most 48 KiB at 2,000 concurrent streams). A real apiserver
// process relays SVC_BENCH_STREAMS (default 2,000) streamed completions
// whose upstream holds each stream open after its first chunk. Once every
// client has read that chunk, the heap (after a forced GC, through the
// pprof listener) and the RSS are read from the process and compared with
// the same figures before the streams opened. Reported per stream:
// heap-KiB (heap in use + goroutine stacks) and rss-KiB.
//
// Two upstreams: http1 is the fake over plain HTTP/1.1 (one upstream
// connection per stream); h2 is the fake over HTTPS, where the apiserver
// negotiates HTTP/2 as with a real provider (streams multiplexed over a
// few connections). SVC_BENCH_HEAP_PROFILE=path saves the heap and
// goroutine profiles at the peak as path-<upstream> and path-<upstream>.goroutine.
func BenchmarkStreamMemory(b *testing.B) {
	for _, up := range []string{"http1", "h2"} {
		b.Run(up, func(b *testing.B) { benchStreamMemory(b, up) })
	}
}

func benchStreamMemory(b *testing.B, upstream string) {
	streams := 2000
	if n, err := strconv.Atoi(os.Getenv("SVC_BENCH_STREAMS")); err == nil && n > 0 {
		streams = n
	}
	e := newEnv(b)
	port, err := testenv.FreePort()
	must(b, err)
	pprofAddr := fmt.Sprintf("127.0.0.1:%d", port)
	apiEnv := []string{"SVC_PPROF_ADDR=" + pprofAddr}
	if upstream == "h2" {
		e.upstream = fakeupstream.NewTLS(b)
		cert := filepath.Join(b.TempDir(), "upstream.pem")
		must(b, os.WriteFile(cert, e.upstream.CertPEM(), 0o600))
		apiEnv = append(apiEnv, "SSL_CERT_FILE="+cert)
	}
	a := e.startAPIWithModels(apiEnv...)
	acc := e.account("bench")
	body := []byte(`{"model":"svc-2-0","stream":true,"messages":[{"role":"user","content":"hold the stream"}]}`)
	tr := &http.Transport{MaxIdleConnsPerHost: streams, MaxConnsPerHost: 0}
	hc := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()

	// Warm up: one full stream, so lazily built state is not counted.
	e.upstream.Script(func(fakeupstream.Request) fakeupstream.Reply { return fakeupstream.Reply{Text: "warm up"} })
	resp, err := post(hc, a.URL+"/v1/chat/completions", acc.key, body)
	must(b, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if want, got := map[string]string{"http1": "HTTP/1.1", "h2": "HTTP/2.0"}[upstream], e.upstream.Requests()[0].Proto; got != want {
		b.Fatalf("upstream request over %s, want %s", got, want)
	}

	for i := 0; i < b.N; i++ {
		hold := make(chan struct{})
		e.upstream.Script(func(fakeupstream.Request) fakeupstream.Reply {
			return fakeupstream.Reply{Text: "released at last", Hold: hold}
		})
		before := memFigures(b, a.URL, pprofAddr)
		var wg sync.WaitGroup
		opened := make(chan error, streams)
		bodies := make(chan io.ReadCloser, streams)
		for s := 0; s < streams; s++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := post(hc, a.URL+"/v1/chat/completions", acc.key, body)
				if err != nil {
					opened <- err
					return
				}
				br := bufio.NewReader(resp.Body)
				line, err := br.ReadString('\n')
				if err == nil && !strings.HasPrefix(line, "data: {") {
					err = fmt.Errorf("first line %q", line)
				}
				opened <- err
				bodies <- resp.Body
			}()
		}
		for s := 0; s < streams; s++ {
			if err := <-opened; err != nil {
				close(hold)
				b.Fatalf("stream %d: %v", s, err)
			}
		}
		during := memFigures(b, a.URL, pprofAddr)
		if path := os.Getenv("SVC_BENCH_HEAP_PROFILE"); path != "" {
			path += "-" + upstream
			saveProfile(b, "http://"+pprofAddr+"/debug/pprof/heap", path)
			saveProfile(b, "http://"+pprofAddr+"/debug/pprof/goroutine", path+".goroutine")
		}
		close(hold)
		wg.Wait()
		close(bodies)
		for rc := range bodies {
			_, _ = io.Copy(io.Discard, rc)
			rc.Close()
		}
		heap := float64(during.heap-before.heap) / float64(streams) / 1024
		rss := float64(during.rss-before.rss) / float64(streams) / 1024
		stacks := float64(during.stacks-before.stacks) / float64(streams) / 1024
		b.ReportMetric(heap, "heap-KiB/stream")
		b.ReportMetric(stacks, "stacks-KiB/stream")
		b.ReportMetric(rss, "rss-KiB/stream")
		b.ReportMetric(float64(during.goroutines-before.goroutines)/float64(streams), "goroutines/stream")
		b.Logf("%d streams: heap+stacks %.1f KiB/stream (stacks %.1f), RSS %.1f KiB/stream, goroutines %.2f/stream",
			streams, heap, stacks, rss, float64(during.goroutines-before.goroutines)/float64(streams))
	}
}

func post(hc *http.Client, url, key string, body []byte) (*http.Response, error) {
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return resp, nil
}

// memSample is one reading of the apiserver's figures: heap is the bytes of
// in-use heap spans plus goroutine stacks (what a held stream costs); live
// is the bytes of live heap objects after a collection, which fragmentation
// does not inflate (what a leak grows).
type memSample struct{ heap, live, stacks, rss, goroutines int64 }

// scrapeClient reads figures without leaving anything behind in the
// process it reads: no kept-alive connection (a goroutine), no gzip (a
// scrape with it allocates a compressor of ~800 KB after the forced GC,
// which the live heap then counts or not).
var scrapeClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DisableCompression: true}}

// memFigures forces a GC in the apiserver (pprof heap with gc=1), then reads
// its Go and process metrics.
func memFigures(b testing.TB, apiURL, pprofAddr string) memSample {
	b.Helper()
	gcs := 1
	if n, err := strconv.Atoi(os.Getenv("SVC_BENCH_GCS")); err == nil && n > 0 {
		gcs = n
	}
	for i := 0; i < gcs; i++ {
		resp, err := scrapeClient.Get("http://" + pprofAddr + "/debug/pprof/heap?gc=1")
		must(b, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	resp, err := scrapeClient.Get(apiURL + "/metrics")
	must(b, err)
	defer resp.Body.Close()
	var m memSample
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(val, 64)
		if err != nil {
			continue
		}
		switch name {
		case "go_memstats_heap_inuse_bytes":
			m.heap += int64(f)
		case "go_memstats_heap_alloc_bytes":
			m.live = int64(f)
		case "go_memstats_stack_inuse_bytes":
			m.heap += int64(f)
			m.stacks = int64(f)
		case "process_resident_memory_bytes":
			m.rss = int64(f)
		case "go_goroutines":
			m.goroutines = int64(f)
		}
	}
	if m.rss == 0 || m.heap == 0 {
		b.Fatal("apiserver /metrics lacks go_memstats/process figures")
	}
	return m
}

// saveProfile writes the profile at url to path (for `go tool pprof`).
func saveProfile(b testing.TB, url, path string) {
	b.Helper()
	resp, err := http.Get(url)
	must(b, err)
	defer resp.Body.Close()
	f, err := os.Create(path)
	must(b, err)
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	must(b, err)
}
