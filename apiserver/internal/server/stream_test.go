package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/svc-dev/svc/apiserver/internal/tracing"
	"github.com/svc-dev/svc/shared/testenv/fakeupstream"
)

func noTracer(*tracetest.SpanRecorder) *tracing.Tracer { return nil }

// openStream starts a streamed completion whose upstream holds after its
// first chunk, and reads that chunk.
func openStream(t *testing.T, g *harness, hold chan struct{}) (*http.Response, *bufio.Reader) {
	t.Helper()
	g.up.Script(func(fakeupstream.Request) fakeupstream.Reply {
		return fakeupstream.Reply{Text: "one two", PromptTokens: 5, CompletionTokens: 2, Hold: hold}
	})
	req, _ := http.NewRequest(http.MethodPost, g.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"svc-2-0","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+g.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: {") {
		t.Fatalf("first line %q: %v", line, err)
	}
	return resp, br
}

// An HTTP/1.1 stream is relayed on a connection taken over from net/http:
// the answer keeps the connection alive and the API's headers, and
// shutdown waits for it to end.
func TestStreamTakenOverDrainsAtShutdown(t *testing.T) {
	t.Parallel()
	g := newGateway(t, noTracer)
	hold := make(chan struct{})
	var release sync.Once
	// A failed check below must not leave the stream held: the server's
	// cleanup would wait for it.
	t.Cleanup(func() { release.Do(func() { close(hold) }) })
	resp, br := openStream(t, g, hold)
	if resp.Close || resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("X-Request-Id") == "" ||
		!strings.Contains(resp.Header.Get("Server-Timing"), "upstream;dur=") || resp.Header.Get("X-Svc-Overhead-Duration-Ms") == "" {
		t.Fatalf("close %v, headers %v", resp.Close, resp.Header)
	}
	if g.streams.Open() != 1 {
		t.Fatalf("%d streams tracked, want 1", g.streams.Open())
	}
	done := make(chan error, 1)
	go func() { done <- g.streams.Shutdown(context.Background()) }()
	release.Do(func() { close(hold) })
	rest, err := io.ReadAll(br)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("rest of the stream %q: %v", rest, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

// Past the shutdown deadline an open stream is cut: the client sees the
// answer end without its last chunk, and Shutdown returns once it ended.
func TestStreamTakenOverCutAtShutdownDeadline(t *testing.T) {
	t.Parallel()
	g := newGateway(t, noTracer)
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	_, br := openStream(t, g, hold)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.streams.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("shutdown: %v", err)
	}
	if g.streams.Open() != 0 {
		t.Fatalf("%d streams still open after the cut", g.streams.Open())
	}
	if _, err := io.ReadAll(br); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a cut stream read to %v, want an unexpected EOF", err)
	}
}

// A taken-over stream gives its connection back when it ends: a
// keep-alive client sends its next streams and a plain completion on the
// same connection, each answered in full; a client that asks to close gets
// Connection: close, and its next request dials again.
func TestStreamKeepsTheConnectionAlive(t *testing.T) {
	t.Parallel()
	g := newGateway(t, noTracer)
	g.up.Script(func(fakeupstream.Request) fakeupstream.Reply {
		return fakeupstream.Reply{Text: "one two", PromptTokens: 5, CompletionTokens: 2}
	})
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	t.Cleanup(hc.CloseIdleConnections)
	// do sends one completion and reads it to the end; it returns whether
	// the connection was reused and whether the answer closes it.
	do := func(stream, close bool) (reused, closes bool) {
		t.Helper()
		body := `{"model":"svc-2-0","messages":[{"role":"user","content":"hi"}]}`
		if stream {
			body = `{"model":"svc-2-0","stream":true,"messages":[{"role":"user","content":"hi"}]}`
		}
		req, _ := http.NewRequest(http.MethodPost, g.url+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+g.key)
		req.Header.Set("Content-Type", "application/json")
		req.Close = close
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("status %d, body %q: %v", resp.StatusCode, b, err)
		}
		if stream && !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
			t.Fatalf("stream did not end with [DONE]: %q", b)
		}
		if !stream && !strings.Contains(string(b), `"one two"`) {
			t.Fatalf("completion %q", b)
		}
		return reused, resp.Close
	}
	for i, tc := range []struct {
		name                   string
		stream, close          bool
		wantReused, wantCloses bool
	}{
		{"first stream dials", true, false, false, false},
		{"second stream reuses the connection", true, false, true, false},
		{"a plain completion after a stream reuses it", false, false, true, false},
		{"a stream after a plain completion reuses it", true, false, true, false},
		{"a client asking to close gets close", true, true, true, true},
		{"so the next stream dials again", true, false, false, false},
	} {
		if reused, closes := do(tc.stream, tc.close); reused != tc.wantReused || closes != tc.wantCloses {
			t.Fatalf("%d %s: reused %v, answer closes %v; want %v, %v", i, tc.name, reused, closes, tc.wantReused, tc.wantCloses)
		}
	}
	// The client reads a stream's last chunk before its relay stops tracking
	// it: wait for the relays to end, as shutdown does.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.streams.Shutdown(ctx); err != nil {
		t.Fatalf("streams still open after their answers ended: %v (%d)", err, g.streams.Open())
	}
}

// A stream is taken over whichever comes first from the upstream:
// its first event with the headers (they then go out together, in one
// write), or the headers alone with the first token still to come (they go
// out at once: a slow first token must not delay them). Either way the
// client gets the API's headers, the whole stream and a connection that
// stays alive, and the stream is tracked from before its headers until its
// relay ends.
func TestStreamTakeoverEitherOrder(t *testing.T) {
	t.Parallel()
	for _, firstTokenLate := range []bool{false, true} {
		name := "first event with the headers"
		if firstTokenLate {
			name = "headers before the first token"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := newGateway(t, noTracer)
			hold := make(chan struct{})
			var release sync.Once
			t.Cleanup(func() { release.Do(func() { close(hold) }) })
			g.up.Script(func(fakeupstream.Request) fakeupstream.Reply {
				r := fakeupstream.Reply{Text: "one two", PromptTokens: 5, CompletionTokens: 2}
				if firstTokenLate {
					r.HoldFirst = hold
				} else {
					r.Hold = hold
				}
				return r
			})
			req, _ := http.NewRequest(http.MethodPost, g.url+"/v1/chat/completions",
				strings.NewReader(`{"model":"svc-2-0","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
			req.Header.Set("Authorization", "Bearer "+g.key)
			req.Header.Set("Content-Type", "application/json")
			hc := &http.Client{Transport: &http.Transport{}}
			t.Cleanup(hc.CloseIdleConnections)
			// The headers arrive while the upstream still holds: before the
			// first token (late), or after the first event (early).
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 || resp.Close || resp.Header.Get("Content-Type") != "text/event-stream" ||
				resp.Header.Get("X-Request-Id") == "" || !strings.Contains(resp.Header.Get("Server-Timing"), "upstream;dur=") {
				t.Fatalf("status %d, close %v, headers %v", resp.StatusCode, resp.Close, resp.Header)
			}
			br := bufio.NewReader(resp.Body)
			if !firstTokenLate {
				if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: {") {
					t.Fatalf("first line %q: %v", line, err)
				}
			}
			if g.streams.Open() != 1 {
				t.Fatalf("%d streams taken over while the upstream holds, want 1", g.streams.Open())
			}
			release.Do(func() { close(hold) })
			rest, err := io.ReadAll(br)
			if err != nil || !strings.Contains(string(rest), `"content":" two"`) || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
				t.Fatalf("rest of the stream %q: %v", rest, err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := g.streams.Shutdown(ctx); err != nil {
				t.Fatalf("relay still open after its answer ended: %v", err)
			}
		})
	}
}

// A stream the upstream refuses (before any event) is answered exactly as a
// plain request with the same upstream answer: the API's error in its
// route's wire format (status, body, headers), with tracing on or off, on a
// connection that stays alive; no stream is left tracked.
func TestStreamRefusedByTheUpstream(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, path, body, rateHeader string
		tracing                      bool
		upstream                     int
	}{
		{"chat, upstream 400", "/v1/chat/completions", `{"model":"svc-2-0",%s"messages":[{"role":"user","content":"hi"}]}`,
			"X-Ratelimit-Limit-Requests", false, http.StatusBadRequest},
		{"chat, upstream 429, traced", "/v1/chat/completions", `{"model":"svc-2-0",%s"messages":[{"role":"user","content":"hi"}]}`,
			"X-Ratelimit-Limit-Requests", true, http.StatusTooManyRequests},
		{"messages, upstream 400", "/v1/messages", `{"model":"svc-2-0","max_tokens":16,%s"messages":[{"role":"user","content":"hi"}]}`,
			"Anthropic-Ratelimit-Requests-Limit", false, http.StatusBadRequest},
		{"messages, upstream 429, traced", "/v1/messages", `{"model":"svc-2-0","max_tokens":16,%s"messages":[{"role":"user","content":"hi"}]}`,
			"Anthropic-Ratelimit-Requests-Limit", true, http.StatusTooManyRequests},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tracer := noTracer
			if tc.tracing {
				tracer = sdkTracer
			}
			g := newGateway(t, tracer)
			g.up.Script(func(fakeupstream.Request) fakeupstream.Reply {
				return fakeupstream.Reply{Status: tc.upstream, RetryAfter: "3"}
			})
			hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			t.Cleanup(hc.CloseIdleConnections)
			do := func(stream bool) (resp *http.Response, body string, reused bool) {
				t.Helper()
				field := ""
				if stream {
					field = `"stream":true,`
				}
				req, _ := http.NewRequest(http.MethodPost, g.url+tc.path, strings.NewReader(fmt.Sprintf(tc.body, field)))
				req.Header.Set("Authorization", "Bearer "+g.key)
				req.Header.Set("Content-Type", "application/json")
				req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
					GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}))
				resp, err := hc.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				return resp, strings.ReplaceAll(string(b), resp.Header.Get("X-Request-Id"), "<id>"), reused
			}
			plain, plainBody, _ := do(false)
			streamed, streamedBody, reused := do(true)
			if !reused {
				t.Error("the stream did not reuse the plain request's connection")
			}
			if plain.StatusCode < 400 || streamed.StatusCode != plain.StatusCode || streamedBody != plainBody {
				t.Fatalf("stream refused with %d %q; a plain request with %d %q", streamed.StatusCode, streamedBody,
					plain.StatusCode, plainBody)
			}
			for _, h := range []string{"Content-Type", "Retry-After", tc.rateHeader} {
				if streamed.Header.Get(h) != plain.Header.Get(h) {
					t.Errorf("%s: stream %q, plain %q", h, streamed.Header.Get(h), plain.Header.Get(h))
				}
			}
			if streamed.Header.Get(tc.rateHeader) == "" || streamed.Header.Get("X-Request-Id") == "" ||
				!strings.Contains(streamed.Header.Get("Server-Timing"), "upstream;dur=") || streamed.Close {
				t.Errorf("stream's refusal: close %v, headers %v", streamed.Close, streamed.Header)
			}
			if g.streams.Open() != 0 {
				t.Errorf("%d streams still tracked after the refusal", g.streams.Open())
			}
			// The connection is still good: the next request reuses it.
			if _, _, reused := do(false); !reused {
				t.Error("the request after the refusal did not reuse its connection")
			}
		})
	}
}
