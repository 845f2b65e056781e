package gateway

import (
	"bufio"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/net/http/httpguts"
)

// A stream's connection is taken over while the upstream works on the
// answer. detach (takeover.go) takes an HTTP/1.1 client's connection over
// from net/http once the upstream has answered 200; its Hijack waits for
// net/http's background read of the connection to stop (a goroutine
// wake-up), so it is done after the first event's write, beside the
// client's read of it. When the upstream is reached over plain HTTP
// (upstream/h1.go) there is a better moment: between the upstream request's
// write and its answer (upstream.Written), while the gateway would wait
// anyway. The connection is taken over then, and the answer is written on
// it by takenResponse, an http.ResponseWriter that writes HTTP/1.1 itself:
// the status line, the headers and the events that came in with the
// upstream's headers in one write, without net/http's response machinery
// (the header map's clone, its sorted write, its chunk writer) on the way
// to the first token. Whatever the answer turns out to be — the stream, an
// upstream's error, a refusal — it is written through echo's response as
// before; only the writer under it changed. detach then finds the
// connection already taken (takenResponse.Hijack) and starts the relay;
// any other answer is ended by Observe (endTaken), and the connection goes
// back to net/http (recycle.go) or is closed, as a taken-over stream's.

// takeOverEarly takes x's client connection over from net/http, when x is a
// stream whose connection detach would take over anyway; it runs from
// Written, while the upstream works on the answer.
func (a *API) takeOverEarly(x *exchange) {
	c := x.c
	if c == nil || !x.req.Stream || a.Streams == nil {
		return
	}
	t := x.t
	if !t.observed || t.taken != nil {
		return
	}
	req, res := c.Request(), c.Response()
	if req.ProtoMajor != 1 || req.ProtoMinor != 1 || !hijackable(res.Writer) {
		return
	}
	back := a.Streams.recycler()
	if back != nil && (req.Close || req.TLS != nil || !bodyRead(req)) {
		back = nil
	}
	// Tracked before the connection leaves net/http's hands (see detach).
	held := a.Streams.add(x.cancel)
	h := res.Header()
	conn, brw, err := http.NewResponseController(res.Writer).Hijack()
	if err != nil {
		a.Streams.remove(held)
		return
	}
	a.Streams.attach(held, conn)
	if brw.Reader.Buffered() > 0 {
		back = nil // bytes of a next request: net/http cannot get them back
	}
	tr := &takenResponse{conn: conn, brw: brw, header: h, back: back, streams: a.Streams, held: held}
	res.Writer = tr
	t.taken = tr
	x.held = held
}

// takenResponse is an http.ResponseWriter on a client connection taken over
// from net/http (HTTP/1.1). Writes are kept until Flush, which writes them
// with the status line and headers before them (chunked: Transfer-Encoding
// chunked), or until end, which writes a whole answer (Content-Length).
type takenResponse struct {
	conn   net.Conn
	brw    *bufio.ReadWriter // net/http's, handed on by Hijack
	header http.Header
	status int
	body   []byte // written, not yet sent
	// headSent: the status line and headers went out (chunked).
	headSent bool
	// hijacked: detach took the connection (the relay owns it now).
	hijacked bool
	ended    bool // end or abandon ran
	err      error
	deadline bool // SetWriteDeadline bounds the writes
	back     *recyclingListener // nil: the connection is closed at the end
	streams  *Streams
	held     *held
}

func (w *takenResponse) Header() http.Header { return w.header }

func (w *takenResponse) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *takenResponse) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.err != nil {
		return 0, w.err
	}
	w.body = append(w.body, b...)
	return len(b), nil
}

// FlushError sends what was written, as the status line and headers (once)
// and one chunk.
func (w *takenResponse) FlushError() error {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	var out []byte
	if !w.headSent {
		w.headSent = true
		out = w.appendHead(make([]byte, 0, 1024+len(w.body)+16), "Transfer-Encoding", "chunked")
	}
	if len(w.body) > 0 {
		out = strconv.AppendInt(out, int64(len(w.body)), 16)
		out = append(out, '\r', '\n')
		out = append(out, w.body...)
		out = append(out, '\r', '\n')
		w.body = w.body[:0]
	}
	w.write(out)
	return w.err
}

// Flush is FlushError for callers that ask for http.Flusher.
func (w *takenResponse) Flush() { _ = w.FlushError() }

// SetWriteDeadline bounds the connection's writes (the write timeout of a
// non-streamed answer, httpmw.WriteTimeout).
func (w *takenResponse) SetWriteDeadline(t time.Time) error {
	w.deadline = !t.IsZero()
	return w.conn.SetWriteDeadline(t)
}

// Hijack hands the connection on (to detach, whose relay writes the rest of
// the stream); what was written must have been flushed.
func (w *takenResponse) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if len(w.body) > 0 {
		w.Flush()
	}
	w.hijacked = true
	return w.conn, w.brw, w.err
}

// appendHead appends the status line, the headers (sorted, as net/http
// writes them, with Date when the handler set none) and the blank line;
// extra, when its key is set, is one more header (the framing). Names net/http would not send are
// left out, and a value's line breaks become spaces, as net/http does.
func (w *takenResponse) appendHead(b []byte, extraKey, extraValue string) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(w.status), 10)
	b = append(b, ' ')
	text := http.StatusText(w.status)
	if text == "" {
		text = "status code " + strconv.Itoa(w.status)
	}
	b = append(b, text...)
	b = append(b, '\r', '\n')
	var keysArr [32]string
	keys := keysArr[:0]
	for k := range w.header {
		if k == "Content-Length" || k == "Transfer-Encoding" {
			continue // the framing is this writer's
		}
		if httpguts.ValidHeaderFieldName(k) {
			keys = append(keys, k)
		}
	}
	if w.back == nil && w.header["Connection"] == nil {
		keys = append(keys, "Connection")
	}
	slices.Sort(keys)
	for _, k := range keys {
		vs := w.header[k]
		if k == "Connection" && vs == nil {
			vs = []string{"close"}
		}
		for _, v := range vs {
			b = append(b, k...)
			b = append(b, ':', ' ')
			b = appendHeaderValue(b, v)
			b = append(b, '\r', '\n')
		}
	}
	if w.header["Date"] == nil {
		b = append(b, "Date: "...)
		b = time.Now().UTC().AppendFormat(b, http.TimeFormat)
		b = append(b, '\r', '\n')
	}
	if extraKey != "" {
		b = append(b, extraKey...)
		b = append(b, ':', ' ')
		b = append(b, extraValue...)
		b = append(b, '\r', '\n')
	}
	return append(b, '\r', '\n')
}

// bodyless reports whether an answer with status code has no body and no
// Content-Length (RFC 9110 §8.6: 1xx, 204 and 304).
func bodyless(code int) bool {
	return code < 200 || code == http.StatusNoContent || code == http.StatusNotModified
}

// appendHeaderValue appends v with its CR and LF as spaces and its
// surrounding blanks trimmed (net/http's header writer).
func appendHeaderValue(b []byte, v string) []byte {
	v = strings.TrimSpace(v)
	if strings.IndexByte(v, '\r') < 0 && strings.IndexByte(v, '\n') < 0 {
		return append(b, v...)
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		b = append(b, c)
	}
	return b
}

func (w *takenResponse) write(b []byte) {
	if w.err != nil || len(b) == 0 {
		return
	}
	if !w.deadline {
		w.err = w.conn.SetWriteDeadline(time.Now().Add(StreamWriteTimeout))
	}
	if w.err == nil {
		_, w.err = w.conn.Write(b)
	}
	if w.err != nil {
		w.conn.Close()
	}
}

// end finishes an answer detach did not take: a whole one (Content-Length)
// or a flushed one's last chunk, then gives the connection back or closes
// it, and ends the stream's tracking.
func (w *takenResponse) end() {
	if w.hijacked || w.ended {
		return
	}
	w.ended = true
	if w.status == 0 {
		w.status = http.StatusOK
	}
	var out []byte
	if w.headSent {
		if len(w.body) > 0 {
			w.Flush()
		}
		out = []byte("0\r\n\r\n")
	} else if bodyless(w.status) {
		out = w.appendHead(make([]byte, 0, 1024), "", "")
	} else {
		out = w.appendHead(make([]byte, 0, 1024+len(w.body)), "Content-Length", strconv.Itoa(len(w.body)))
		out = append(out, w.body...)
	}
	w.write(out)
	w.body = nil
	keep := w.back != nil && !httpguts.HeaderValuesContainsToken(w.header["Connection"], "close")
	if w.err == nil && keep && w.conn.SetDeadline(time.Time{}) == nil {
		if tc := tcpConn(w.conn); tc != nil && w.back.giveBack(tc) {
			w.streams.remove(w.held)
			return
		}
	}
	if w.err == nil {
		if cw, ok := w.conn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		w.conn.Close()
	}
	w.streams.remove(w.held)
}

// abandon closes the connection without an answer's end (a panic in the
// handler chain) and ends the stream's tracking.
func (w *takenResponse) abandon() {
	w.ended = true
	w.conn.Close()
	w.streams.remove(w.held)
}

// endTaken ends the answer of a request whose connection was taken over
// early and not handed to a relay: err (the handler chain's) is written
// through echo's error handler first. Observe calls it.
func endTaken(c echo.Context, tr *takenResponse, err error) {
	if tr.hijacked {
		return
	}
	if err != nil && !c.Response().Committed {
		c.Error(err)
	}
	tr.end()
}
