package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/gateway"
)

// The floor of the gateway benchmarks (gateway_report_bench_test.go): a bare
// Go reverse proxy (net/http/httputil) in a process of its own, and a cheap
// upstream that answers canned OpenAI chat-completions bytes.

// bareProxyEnv, set to the upstream's base URL, makes the e2e test binary
// run as the bare reverse proxy instead of the tests (TestMain).
const bareProxyEnv = "SVC_BENCH_BARE_PROXY_UPSTREAM"

// runBareProxy is the bare proxy's main: httputil.ReverseProxy to the
// upstream with a pooled transport sized like the gateway's, flushing every
// write (as the gateway relays every event). It prints its address on the
// first line of stdout and serves its own memory figures at /__stats
// (after a GC with ?gc=1).
func runBareProxy() int {
	target, err := url.Parse(os.Getenv(bareProxyEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	idle, _ := strconv.Atoi(os.Getenv("SVC_BENCH_BARE_PROXY_IDLE_PER_HOST"))
	if idle <= 0 {
		idle = 64
	}
	tr := &http.Transport{Proxy: nil, MaxIdleConns: 1024, MaxIdleConnsPerHost: idle,
		IdleConnTimeout: 90 * time.Second, DisableCompression: true, ForceAttemptHTTP2: true}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target); r.Out.Host = target.Host },
		Transport:     tr,
		FlushInterval: -1,
	}
	target.Path = strings.TrimSuffix(target.Path, "/v1") // requests already carry /v1/…
	var handler http.Handler = rp
	if os.Getenv("SVC_BENCH_BARE_PROXY_TIMING") == "1" {
		handler = timedProxy(rp)
	}
	if os.Getenv("SVC_BENCH_BARE_PROXY_HEADERS") == "governed" {
		governedHeaders(rp)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/__stats", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("gc") == "1" {
			runtime.GC()
		}
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		_ = json.NewEncoder(w).Encode(map[string]int64{"heap": int64(m.HeapInuse + m.StackInuse),
			"stacks": int64(m.StackInuse), "goroutines": int64(runtime.NumGoroutine()), "mallocs": int64(m.Mallocs)})
	})
	mux.Handle("/", handler)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(ln.Addr().String())
	_ = (&http.Server{Handler: mux}).Serve(ln)
	return 0
}

// timedProxy makes rp answer with the gateway's overhead headers
// (SVC_BENCH_BARE_PROXY_TIMING=1, for a diagnostic run: two more headers
// than the bare proxy sends otherwise): its time until the answer's headers
// minus its upstream exchange, and that exchange as Server-Timing's
// upstream, so the board's serverTimingP50us compares the two servers'
// phases.
func timedProxy(rp *httputil.ReverseProxy) http.Handler {
	type stamps struct{ start, sent time.Time }
	type key struct{}
	next := rp.Transport
	rp.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r.Context().Value(key{}).(*stamps).sent = time.Now()
		return next.RoundTrip(r)
	})
	rp.ModifyResponse = func(resp *http.Response) error {
		st := resp.Request.Context().Value(key{}).(*stamps)
		now := time.Now()
		upstream := now.Sub(st.sent)
		resp.Header.Set(gateway.HeaderOverhead, strconv.FormatFloat(float64(now.Sub(st.start)-upstream)/1e6, 'f', 3, 64))
		resp.Header.Set(gateway.HeaderServerTiming, "upstream;dur="+strconv.FormatFloat(float64(upstream)/1e6, 'f', 3, 64))
		return nil
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), key{}, &stamps{start: time.Now()})))
	})
}

// governedHeaders makes rp's answers carry a header block of the gateway's
// shape and size (SVC_BENCH_BARE_PROXY_HEADERS=governed, for a diagnostic
// run): the rate-limit headers of both conventions, a request id, the
// overhead headers (unless timedProxy sets them) and a stream's buffering
// headers, with values as long as the gateway's, so the cost of writing
// and reading that block can be told from the rest of the gateway's path.
func governedHeaders(rp *httputil.ReverseProxy) {
	block := [][2]string{
		{"Ratelimit", `"requests";r=999999936;t=47`},
		{"Ratelimit-Policy", `"requests";q=1000000000;w=60`},
		{"X-Ratelimit-Limit-Requests", "1000000000"},
		{"X-Ratelimit-Limit-Tokens", "333333333333333"},
		{"X-Ratelimit-Remaining-Requests", "999999936"},
		{"X-Ratelimit-Remaining-Tokens", "333333333332041"},
		{"X-Ratelimit-Reset-Requests", "46s"},
		{"X-Ratelimit-Reset-Tokens", "5h0m0s"},
		{"X-Request-Id", "9ba03dd21bde3b109027bd2540824106"},
		{"Cache-Control", "no-cache"},
		{"X-Accel-Buffering", "no"},
		{gateway.HeaderOverhead, "0.042"},
		{gateway.HeaderServerTiming, "auth;dur=0.013, admit;dur=0.006, upstream;dur=0.200"},
	}
	vals := make([][]string, len(block)) // built once: an answer only adds map entries
	for i, kv := range block {
		vals[i] = []string{kv[1]}
	}
	next := rp.ModifyResponse
	rp.ModifyResponse = func(resp *http.Response) error {
		if next != nil {
			if err := next(resp); err != nil {
				return err
			}
		}
		for i, kv := range block {
			if _, set := resp.Header[kv[0]]; !set {
				resp.Header[kv[0]] = vals[i]
			}
		}
		return nil
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// bareProxy is a running bare proxy process.
type bareProxy struct {
	URL string
	cmd *exec.Cmd
}

func startBareProxy(b testing.TB, upstreamBase string) *bareProxy {
	b.Helper()
	exe, err := os.Executable()
	must(b, err)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), bareProxyEnv+"="+upstreamBase)
	out, err := cmd.StdoutPipe()
	must(b, err)
	cmd.Stderr = os.Stderr
	must(b, cmd.Start())
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("bare proxy did not start: %v", err)
	}
	return &bareProxy{URL: "http://" + strings.TrimSpace(line), cmd: cmd}
}

// stats reads the proxy's heap+stacks and goroutines after a GC.
func (p *bareProxy) stats(b testing.TB) memSample {
	b.Helper()
	resp, err := http.Get(p.URL + "/__stats?gc=1")
	must(b, err)
	defer resp.Body.Close()
	var m map[string]int64
	must(b, json.NewDecoder(resp.Body).Decode(&m))
	return memSample{heap: m["heap"], stacks: m["stacks"], goroutines: m["goroutines"], rss: rssOf(b, p.cmd.Process.Pid)}
}

// rssOf is a process's resident set (VmRSS of /proc/<pid>/status).
func rssOf(b testing.TB, pid int) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	must(b, err)
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	b.Fatalf("no VmRSS for %d", pid)
	return 0
}

// benchUpstream answers /v1/chat/completions with canned bytes: a plain
// answer, or a stream of frames spaced by gap. A request whose body holds
// "hold the stream" gets its first frame, then waits for release.
type benchUpstream struct {
	*httptest.Server
	frames int
	gap    time.Duration
	mu     sync.Mutex
	hold   chan struct{}
	served atomic.Int64
	open   atomic.Int64 // connections open (the gateway's pool and streams)
}

// countConns keeps u.open; call before the server starts.
func (u *benchUpstream) countConns() {
	u.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			u.open.Add(1)
		case http.StateClosed, http.StateHijacked:
			u.open.Add(-1)
		}
	}
}

const benchPlainAnswer = `{"id":"chatcmpl-b","object":"chat.completion","created":1700000000,"model":"up-2","choices":[{"index":0,"message":{"role":"assistant","content":"benchmark answer"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}`

func newBenchUpstream(b testing.TB, frames int, gap time.Duration) *benchUpstream {
	u := &benchUpstream{frames: frames, gap: gap, hold: make(chan struct{})}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(u.serve))
	u.countConns()
	u.Start()
	b.Cleanup(func() { u.release(); u.Close() })
	return u
}

// newBenchUpstreamTLS is a benchUpstream served over TLS with HTTP/2, as
// model providers serve; certFile (PEM) is its certificate, for the client's
// SSL_CERT_FILE.
func newBenchUpstreamTLS(b testing.TB, frames int, gap time.Duration) (u *benchUpstream, certFile string) {
	u = &benchUpstream{frames: frames, gap: gap, hold: make(chan struct{})}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(u.serve))
	u.countConns()
	u.EnableHTTP2 = true
	u.StartTLS()
	b.Cleanup(func() { u.release(); u.Close() })
	certFile = filepath.Join(b.TempDir(), "upstream.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: u.Certificate().Raw})
	if err := os.WriteFile(certFile, pemBytes, 0o600); err != nil {
		b.Fatal(err)
	}
	return u, certFile
}

func (u *benchUpstream) BaseURL() string { return u.URL + "/v1" }

// release ends every held stream; later holds wait on a new channel.
func (u *benchUpstream) release() {
	u.mu.Lock()
	close(u.hold)
	u.hold = make(chan struct{})
	u.mu.Unlock()
}

func (u *benchUpstream) serve(w http.ResponseWriter, r *http.Request) {
	u.served.Add(1)
	body, _ := io.ReadAll(r.Body)
	if !bytes.Contains(body, []byte(`"stream":true`)) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(benchPlainAnswer)))
		_, _ = io.WriteString(w, benchPlainAnswer)
		return
	}
	u.mu.Lock()
	hold := u.hold
	u.mu.Unlock()
	held := bytes.Contains(body, []byte("hold the stream"))
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	fl := w.(http.Flusher)
	buf := make([]byte, 0, 256)
	for i := 0; i < u.frames; i++ {
		if i > 0 {
			time.Sleep(u.gap)
		}
		buf = append(buf[:0], `data: {"id":"chatcmpl-b","object":"chat.completion.chunk","created":1700000000,"model":"up-2","choices":[{"index":0,"delta":{`...)
		if i == 0 {
			buf = append(buf, `"role":"assistant",`...)
		}
		buf = append(buf, `"content":"tok`...)
		buf = strconv.AppendInt(buf, int64(i), 10)
		buf = append(buf, ` "},"finish_reason":null}]}`+"\n\n"...)
		_, _ = w.Write(buf)
		fl.Flush()
		if i == 0 && held {
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
		}
	}
	_, _ = io.WriteString(w, `data: {"id":"chatcmpl-b","object":"chat.completion.chunk","created":1700000000,"model":"up-2","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\n")
	if bytes.Contains(body, []byte(`"include_usage":true`)) {
		_, _ = io.WriteString(w, `data: {"id":"chatcmpl-b","object":"chat.completion.chunk","created":1700000000,"model":"up-2","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}`+"\n\n")
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
	fl.Flush()
}
