package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestTakenResponseIsHTTP: what takenResponse writes on a connection taken
// over early, read back by net/http's own response parser, is the HTTP/1.1
// answer net/http would have written — a whole answer with its length, or a
// flushed one chunked — with the handler's headers (a value's line breaks
// made spaces, a name net/http would not send left out), a Date, and
// Connection: close when the connection cannot go back to net/http, which
// it is then closed after; and the stream's tracking ends with the answer.
func TestTakenResponseIsHTTP(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		write   func(w *takenResponse)
		status  int
		body    string
		chunked bool
	}{
		{"whole answer", func(w *takenResponse) {
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"error":`))
			_, _ = w.Write([]byte(`{}}`))
		}, http.StatusTooManyRequests, `{"error":{}}`, false},
		{"no body, no length", func(w *takenResponse) { w.WriteHeader(http.StatusNoContent) }, http.StatusNoContent, "", false},
		{"flushed, then more", func(w *takenResponse) {
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte("data: one\n\n"))
			w.Flush()
			_, _ = w.Write([]byte("data: two\n\n"))
		}, http.StatusOK, "data: one\n\ndata: two\n\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			server, client := net.Pipe()
			streams := &Streams{}
			h := http.Header{}
			h.Set("Content-Type", "application/json")
			h.Set("X-Request-Id", "req-1")
			h["X-Split"] = []string{"a\r\nInjected: yes"}
			h["Bad Name"] = []string{"x"}
			w := &takenResponse{conn: server, header: h, streams: streams, held: streams.add(func() {})}
			go func() {
				tc.write(w)
				w.end()
			}()
			resp, err := http.ReadResponse(bufio.NewReader(client), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("reading the body: %v", err)
			}
			if resp.StatusCode != tc.status || string(body) != tc.body || !resp.Close {
				t.Fatalf("status %d, body %q, close %v", resp.StatusCode, body, resp.Close)
			}
			chunked := len(resp.TransferEncoding) == 1 && resp.TransferEncoding[0] == "chunked"
			length, hasLength := resp.Header["Content-Length"]
			wantLength := !tc.chunked && tc.status != http.StatusNoContent
			if chunked != tc.chunked || hasLength != wantLength || (wantLength && length[0] != strconv.Itoa(len(tc.body))) {
				t.Fatalf("transfer-encoding %v, content length %v", resp.TransferEncoding, length)
			}
			if resp.Header.Get("X-Request-Id") != "req-1" || resp.Header.Get("X-Split") != "a  Injected: yes" ||
				resp.Header.Get("Injected") != "" || resp.Header.Get("Date") == "" || resp.Header.Get("Bad Name") != "" {
				t.Fatalf("headers %v", resp.Header)
			}
			if _, err := client.Read(make([]byte, 1)); err != io.EOF {
				t.Fatalf("connection not closed after the answer: %v", err)
			}
			if streams.Open() != 0 {
				t.Fatal("the stream is still tracked after its answer ended")
			}
		})
	}
}

// TestTakenResponseHandsOn: once detach took the connection (Hijack), the
// answer is the relay's: what was written before goes out first, and end
// writes nothing more nor ends the tracking. abandon (a panic in the handler
// chain before the answer ended) closes the connection without an answer
// and ends the tracking.
func TestTakenResponseHandsOn(t *testing.T) {
	t.Parallel()
	open := func() (*takenResponse, *Streams, chan string) {
		server, client := net.Pipe()
		streams := &Streams{}
		w := &takenResponse{conn: server, header: http.Header{}, streams: streams, held: streams.add(func() {})}
		got := make(chan string, 1)
		go func() {
			b, _ := io.ReadAll(client)
			got <- string(b)
		}()
		return w, streams, got
	}

	w, streams, got := open()
	_, _ = w.Write([]byte("first"))
	conn, _, err := w.Hijack()
	if err != nil || conn != w.conn {
		t.Fatalf("hijack: %v, %v", conn, err)
	}
	w.end()
	if streams.Open() != 1 {
		t.Fatal("end ended the tracking of a stream the relay owns")
	}
	_, _ = io.WriteString(conn, "0\r\n\r\n") // the relay's last chunk
	conn.Close()
	if out := <-got; !strings.HasPrefix(out, "HTTP/1.1 200 OK\r\n") ||
		!strings.HasSuffix(out, "Transfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n0\r\n\r\n") {
		t.Fatalf("written %q", out)
	}

	w, streams, got = open()
	w.WriteHeader(http.StatusInternalServerError)
	_, _ = w.Write([]byte("never sent"))
	w.abandon()
	w.end()
	if out := <-got; out != "" {
		t.Fatalf("an abandoned answer wrote %q", out)
	}
	if streams.Open() != 0 {
		t.Fatal("abandon did not end the tracking")
	}
}
