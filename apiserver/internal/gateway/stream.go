package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"unsafe"

	"github.com/labstack/echo/v4"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/svc-dev/svc/apiserver/internal/metering"
)

// maxSSELine bounds one upstream event line.
const maxSSELine = 4 << 20

// initialSSELine is the line buffer a stream takes from the pool: events are
// typically a few hundred bytes, and a longer line doubles its own buffer up
// to maxSSELine (a 64 KiB buffer per stream was two thirds of the heap at
// 2,000 open streams).
const initialSSELine = 1 << 10

// lineBufs pools the line buffers and outBufs the buffers that frame an
// event. A stream holds a line buffer only while part of a line is pending
// and an output buffer only while writing one event, so an open stream
// waiting for its next event holds neither. Only buffers of about the
// initial size go back (a grown buffer is dropped).
var (
	lineBufs = sync.Pool{New: func() any { b := make([]byte, initialSSELine); return &b }}
	outBufs  = sync.Pool{New: func() any { b := make([]byte, 0, initialSSELine); return &b }}
)

var (
	dataPrefix = []byte("data:")
	doneMarker = []byte("[DONE]")
)

// errTooLong: an upstream line longer than maxSSELine.
var errTooLong = errors.New("gateway: upstream event line too long")

// lineReader splits an upstream stream into lines (as bufio.ScanLines: "\n"
// ends a line, a "\r" before it is dropped, a last line without "\n" still
// counts). While it waits for the next line it blocks on a one-byte read into
// itself and holds no buffer; what follows that byte is read into a pooled
// buffer that goes back as soon as no partial line is left.
type lineReader struct {
	r          io.Reader
	one        [1]byte
	buf        *[]byte // nil while no bytes are pending
	start, end int     // pending bytes: (*buf)[start:end]
	err        error   // the reader's error, returned once the pending bytes are used up
}

// next returns the next line, valid until the following call; at the end it
// returns io.EOF, or the reader's error, or errTooLong.
func (l *lineReader) next() ([]byte, error) {
	empty := 0
	for {
		if l.buf != nil {
			b := (*l.buf)[l.start:l.end]
			if i := bytes.IndexByte(b, '\n'); i >= 0 {
				l.start += i + 1
				return dropCR(b[:i]), nil
			}
			if l.err != nil && len(b) > 0 {
				l.start = l.end
				return dropCR(b), nil
			}
			if len(b) == 0 {
				l.release()
			}
		}
		if l.err != nil {
			return nil, l.err
		}
		var n int
		var err error
		if l.buf == nil {
			// Nothing pending: wait for the next byte without a buffer.
			n, err = l.r.Read(l.one[:])
			if n > 0 {
				l.buf = lineBufs.Get().(*[]byte)
				(*l.buf)[0] = l.one[0]
				l.start, l.end = 0, 1
			}
		} else {
			if err := l.room(); err != nil {
				l.release()
				l.err = err
				return nil, err
			}
			n, err = l.r.Read((*l.buf)[l.end:])
			l.end += n
		}
		if err != nil {
			l.err = err
		} else if n == 0 {
			if empty++; empty >= 100 {
				l.err = io.ErrNoProgress
			}
		}
	}
}

// pendingLine reports whether a whole line is pending (next returns it
// without reading).
func (l *lineReader) pendingLine() bool {
	return l.buf != nil && bytes.IndexByte((*l.buf)[l.start:l.end], '\n') >= 0
}

// room makes space after the pending bytes: it moves them to the front, or
// doubles the buffer up to maxSSELine.
func (l *lineReader) room() error {
	b := *l.buf
	if l.end < len(b) {
		return nil
	}
	if l.start > 0 {
		l.end = copy(b, b[l.start:l.end])
		l.start = 0
		return nil
	}
	if len(b) >= maxSSELine {
		return errTooLong
	}
	grown := make([]byte, min(2*len(b), maxSSELine))
	end := copy(grown, b[:l.end])
	l.release()
	l.buf, l.end = &grown, end
	return nil
}

// release gives the buffer back (only one of the initial size is pooled).
func (l *lineReader) release() {
	if l.buf != nil && len(*l.buf) == initialSSELine {
		lineBufs.Put(l.buf)
	}
	l.buf, l.start, l.end = nil, 0, 0
}

func dropCR(b []byte) []byte {
	if len(b) > 0 && b[len(b)-1] == '\r' {
		return b[:len(b)-1]
	}
	return b
}

// eventWriter sends one server-sent event to the client, framed and
// flushed: through echo's response (responseEvents) or on a connection
// taken over from net/http (connEvents). name is the event's "event:"
// field (empty for the chat-completions stream, which has none).
type eventWriter interface {
	event(name string, payload []byte) error
}

// responseEvents writes events through the handler's response, each
// flushed unless noFlush (the caller flushes).
type responseEvents struct {
	w       *echo.Response
	noFlush bool
}

func (r responseEvents) event(name string, payload []byte) error {
	out := outBufs.Get().(*[]byte)
	*out = appendSSE((*out)[:0], name, payload)
	_, err := r.w.Write(*out)
	if err == nil && !r.noFlush {
		r.w.Flush()
	}
	putOut(out)
	return err
}

// putOut gives an output buffer back (a grown one is dropped).
func putOut(out *[]byte) {
	if cap(*out) <= 4*initialSSELine {
		outBufs.Put(out)
	}
}

// setSSEHeaders sets the headers of a streamed answer; closing adds
// Connection: close (HTTP/1.1 keeps a connection open unless it says so,
// and HTTP/2 has no such header).
func setSSEHeaders(h http.Header, closing bool) {
	// One backing array for the values; the keys are canonical already.
	v := []string{"text/event-stream", "no-cache", "no", "close"}
	h[echo.HeaderContentType] = v[0:1:1]
	h["Cache-Control"] = v[1:2:2]
	h["X-Accel-Buffering"] = v[2:3:3]
	if closing {
		h["Connection"] = v[3:4:4]
	}
}

// stream answers with the relayed chat-completion chunks through the
// handler's response (the path of clients that are not taken over: HTTP/2,
// HTTP/1.0); see relayEvents.
func (a *API) stream(c echo.Context, body io.Reader, modelID string, clientWantsUsage bool, done func()) *metering.Usage {
	return a.streamWith(c, body, newChatStream(modelID, clientWantsUsage), done)
}

// streamWith answers with the upstream's stream encoded by enc through the
// handler's response; see relayWith. The headers are flushed with the
// events that came in with the upstream's headers (or alone when there are
// none), as a taken-over stream's are.
func (a *API) streamWith(c echo.Context, body io.Reader, enc streamEncoder, done func()) *metering.Usage {
	w := c.Response()
	setSSEHeaders(w.Header(), false)
	w.WriteHeader(http.StatusOK)
	r := newRelay(responseEvents{w: w, noFlush: true}, body, enc, done)
	r.buffered()
	w.Flush()
	r.s.w = responseEvents{w: w}
	return r.run()
}

// sink is the client's side of a relay: once a write fails the client is
// gone and nothing more is written (the relay still reads the upstream to
// its end, for the usage).
type sink struct {
	w       eventWriter
	gone    bool
	written int // events written
}

func (s *sink) emit(name string, payload []byte) {
	if s.gone {
		return
	}
	if s.w.event(name, payload) != nil {
		s.gone = true
		return
	}
	s.written++
}

// streamEncoder is a codec's side of a stream: it turns the upstream's
// chat-completion chunks into the client's events.
type streamEncoder interface {
	// chunk encodes one upstream chunk (valid JSON) and returns the usage
	// it reports, if any.
	chunk(s *sink, payload []byte) *metering.Usage
	// done ends a complete stream (the upstream sent [DONE]).
	done(s *sink)
	// fail ends a broken stream with one error event saying msg.
	fail(s *sink, msg string)
}

// relayEvents relays an upstream chat-completions stream to a
// chat-completions client (chatStream); see relayWith.
func relayEvents(w eventWriter, body io.Reader, modelID string, clientWantsUsage bool, done func()) *metering.Usage {
	return relayWith(w, body, newChatStream(modelID, clientWantsUsage), done)
}

// relayWith reads the upstream's server-sent events and hands each chunk to
// enc, which writes the client's events; each is flushed as it is written.
// A broken upstream stream ends with enc's error event. When the client
// goes away (a write fails) it keeps reading (without writing) so the final
// usage chunk is still seen; the usage found is returned for metering. done
// is called when the upstream's stream has ended, before the last event is
// flushed.
func relayWith(w eventWriter, body io.Reader, enc streamEncoder, done func()) *metering.Usage {
	r := newRelay(w, body, enc, done)
	return r.run()
}

// eventRelay is relayWith's state, so that a stream can be relayed in two
// parts: the events that came in with the upstream's headers on the
// handler's goroutine, the rest on a goroutine of its own (takeover.go).
type eventRelay struct {
	s       sink
	enc     streamEncoder
	lr      lineReader
	done    func()
	usage   *metering.Usage
	sawDone bool
	ended   bool
	err     error // the upstream's read error (io.EOF: its end)
}

func newRelay(w eventWriter, body io.Reader, enc streamEncoder, done func()) *eventRelay {
	return &eventRelay{s: sink{w: w}, enc: enc, lr: lineReader{r: body}, done: done}
}

func (r *eventRelay) end() {
	if !r.ended {
		r.ended = true
		r.done()
	}
}

// line relays the upstream's next line; false once the stream has ended
// (r.err says how).
func (r *eventRelay) line() bool {
	if r.err != nil {
		return false
	}
	line, err := r.lr.next()
	if err != nil {
		r.err = err
		return false
	}
	if !bytes.HasPrefix(line, dataPrefix) {
		return true // blank separators, comments, event/id fields
	}
	payload := bytes.TrimSpace(line[len(dataPrefix):])
	if bytes.Equal(payload, doneMarker) {
		r.sawDone = true
		r.end()
		r.enc.done(&r.s)
		return true
	}
	if !gjson.ValidBytes(payload) {
		return true
	}
	if u := r.enc.chunk(&r.s, payload); u != nil {
		r.usage = u
	}
	return true
}

// buffered relays lines while a whole one can be read without waiting,
// until an event has been written: the upstream's first event when it came
// in with its headers, without blocking on a slow next one.
func (r *eventRelay) buffered() {
	for r.s.written == 0 && (r.lr.pendingLine() || eventBuffered(r.lr.r)) && r.line() {
	}
}

// run relays the rest of the stream and returns the usage found.
func (r *eventRelay) run() *metering.Usage {
	for r.line() {
	}
	err := r.err
	if err == io.EOF {
		err = nil
	}
	if err != nil || !r.sawDone {
		r.end()
		msg := "The model provider's stream ended before it was complete."
		if errors.Is(err, errTooLong) {
			msg = "The model provider sent an event larger than this server accepts."
		}
		r.enc.fail(&r.s, msg)
	}
	return r.usage
}

// chatStream encodes for chat-completions clients: the upstream's chunks
// as they are, with model rewritten to the public id, the usage chunk (and
// the usage:null fields) removed when the client did not ask for usage.
type chatStream struct {
	modelJSON  []byte
	wantsUsage bool
}

func newChatStream(modelID string, clientWantsUsage bool) *chatStream {
	return &chatStream{modelJSON: jsonString(modelID), wantsUsage: clientWantsUsage}
}

// jsonString is s as json.Marshal writes it: between quotes as it is when
// nothing in it needs escaping (a model id always), else json.Marshal's.
func jsonString(s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < ' ' || c > '~', c == '"', c == '\\', c == '<', c == '>', c == '&':
			b, _ := json.Marshal(s)
			return b
		}
	}
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

func (c *chatStream) chunk(s *sink, payload []byte) *metering.Usage {
	// The fields are read in place (no copy of their raw values): payload
	// is valid for this call, and nothing read here outlives it.
	js := unsafe.String(unsafe.SliceData(payload), len(payload))
	f := chunkFieldsOf(js)
	if f.err.Exists() {
		s.emit("", payload)
		return nil
	}
	u := usageOf(f.usage)
	if u != nil && !c.wantsUsage {
		if ch := f.choices; !ch.Exists() || ch.Type == gjson.Null || (ch.IsArray() && len(ch.Array()) == 0) {
			return u // the usage-only chunk the client did not ask for
		}
	}
	// Both edits from the positions the one pass found: the usage field
	// cut (when the client did not ask for usage) and the model's value
	// replaced, written in one pooled buffer, as sjson.DeleteBytes and
	// sjson.SetRawBytes would write them; anything else goes to sjson.
	cutFrom, cutTo := 0, 0
	if !c.wantsUsage && f.usage.Exists() {
		var ok bool
		if cutFrom, cutTo, ok = topFieldSpan(js, "usage", f.usage); !ok {
			c.chunkSjson(s, payload)
			return u
		}
	}
	m := f.model
	if !m.Exists() && cutTo == 0 {
		s.emit("", payload)
		return u
	}
	at, end := m.Index, m.Index+len(m.Raw)
	if m.Exists() && (at <= 0 || end > len(js) || js[at:end] != m.Raw || (at < cutTo && end > cutFrom)) {
		c.chunkSjson(s, payload)
		return u
	}
	buf := outBufs.Get().(*[]byte)
	b := (*buf)[:0]
	switch {
	case !m.Exists():
		b = append(append(b, payload[:cutFrom]...), payload[cutTo:]...)
	case cutTo == 0:
		b = append(append(append(b, payload[:at]...), c.modelJSON...), payload[end:]...)
	case end <= cutFrom:
		b = append(append(b, payload[:at]...), c.modelJSON...)
		b = append(append(b, payload[end:cutFrom]...), payload[cutTo:]...)
	default: // the model after the usage
		b = append(append(b, payload[:cutFrom]...), payload[cutTo:at]...)
		b = append(append(b, c.modelJSON...), payload[end:]...)
	}
	*buf = b
	s.emit("", b)
	putOut(buf)
	return u
}

// chunkSjson is chunk's edits by sjson, for a chunk whose usage or model
// field the one pass's positions do not cover (a key written with
// escapes, say).
func (c *chatStream) chunkSjson(s *sink, payload []byte) {
	out := payload
	if !c.wantsUsage && gjson.GetBytes(out, "usage").Exists() {
		out, _ = sjson.DeleteBytes(out, "usage")
	}
	if gjson.GetBytes(out, "model").Exists() {
		out, _ = sjson.SetRawBytes(out, "model", c.modelJSON)
	}
	s.emit("", out)
}

// chunkFields are the top-level fields of a chunk that chatStream reads.
type chunkFields struct{ err, usage, choices, model gjson.Result }

// chunkFieldsOf reads chunkFields in one pass over js's top-level object,
// each field's first occurrence, as gjson.Get(js, name) finds it; all are
// absent when js is not an object. js must be valid JSON.
func chunkFieldsOf(js string) chunkFields {
	var f chunkFields
	if eachField(js, func(key string, from, to int) bool {
		if dst := f.field(key); dst != nil && !dst.Exists() {
			*dst = valueAt(js, from, to)
		}
		return true
	}) {
		return f
	}
	// Not an object, or a key written with escapes: gjson unescapes keys.
	f = chunkFields{}
	gjson.Parse(js).ForEach(func(k, v gjson.Result) bool {
		if dst := f.field(k.Str); dst != nil && !dst.Exists() {
			*dst = v
		}
		return true
	})
	return f
}

// field is where the top-level field key goes (nil: not read).
func (f *chunkFields) field(key string) *gjson.Result {
	switch key {
	case "error":
		return &f.err
	case "usage":
		return &f.usage
	case "choices":
		return &f.choices
	case "model":
		return &f.model
	}
	return nil
}

func (c *chatStream) done(s *sink) { s.emit("", doneMarker) }

func (c *chatStream) fail(s *sink, msg string) {
	ev, _ := json.Marshal(map[string]any{"error": map[string]string{
		"message": msg, "type": "server_error", "code": "upstream_stream_error"}})
	s.emit("", ev)
}

// appendSSE appends payload framed as one server-sent event, named when
// name is not empty.
func appendSSE(b []byte, name string, payload []byte) []byte {
	if name != "" {
		b = append(b, "event: "...)
		b = append(b, name...)
		b = append(b, '\n')
	}
	b = append(b, "data: "...)
	b = append(b, payload...)
	return append(b, '\n', '\n')
}
