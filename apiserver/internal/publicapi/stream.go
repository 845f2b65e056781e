package publicapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"

	"github.com/labstack/echo/v4"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/metering"
)

// maxSSELine bounds one upstream event line.
const maxSSELine = 4 << 20

// initialSSELine is the scanner buffer a stream starts with: events are
// typically a few hundred bytes, and the scanner doubles its buffer up to
// maxSSELine for a longer one (a 64 KiB buffer per stream was
// two thirds of the heap at 2,000 open streams).
const initialSSELine = 1 << 10

// lineBufs pools the initial scanner buffers and outBufs the per-stream
// output buffers, so a burst of short streams does not allocate each anew.
// Only buffers of the initial size go back (a stream that grew keeps its
// large buffer out of the pool).
var (
	lineBufs = sync.Pool{New: func() any { b := make([]byte, initialSSELine); return &b }}
	outBufs  = sync.Pool{New: func() any { b := make([]byte, 0, initialSSELine); return &b }}
)

var (
	dataPrefix = []byte("data:")
	doneMarker = []byte("[DONE]")
)

// stream relays the upstream's server-sent events chunk by chunk, flushing
// each as it arrives. It rewrites model to the public id, removes the usage
// chunk (and the usage:null fields) when the client did not ask for usage,
// and ends a broken upstream stream with one error event. When the client
// goes away it keeps reading (without writing) so the final usage chunk is
// still seen; the usage found is returned for metering.
// done is called when the upstream's stream has ended, before the last
// event is flushed.
func (a *API) stream(c echo.Context, body io.Reader, model catalog.Model, clientWantsUsage bool, done func()) *metering.Usage {
	w := c.Response()
	h := w.Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	w.Flush()

	modelJSON, _ := json.Marshal(model.ID)
	clientGone := false
	write := func(b []byte) {
		if clientGone {
			return
		}
		if _, err := w.Write(b); err != nil {
			clientGone = true
			return
		}
		w.Flush()
	}

	var usage *metering.Usage
	sawDone, ended := false, false
	end := func() {
		if !ended {
			ended = true
			done()
		}
	}
	lineBuf := lineBufs.Get().(*[]byte)
	defer lineBufs.Put(lineBuf)
	outBuf := outBufs.Get().(*[]byte)
	defer func() {
		if cap(*outBuf) <= 4*initialSSELine {
			*outBuf = (*outBuf)[:0]
			outBufs.Put(outBuf)
		}
	}()
	// event frames payload as one "data: …\n\n" write, reusing outBuf.
	event := func(payload []byte) []byte {
		*outBuf = appendSSE((*outBuf)[:0], payload)
		return *outBuf
	}
	sc := bufio.NewScanner(body)
	sc.Buffer((*lineBuf)[:0:len(*lineBuf)], maxSSELine)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, dataPrefix) {
			continue // blank separators, comments, event/id fields
		}
		payload := bytes.TrimSpace(line[len(dataPrefix):])
		if bytes.Equal(payload, doneMarker) {
			sawDone = true
			end()
			write([]byte("data: [DONE]\n\n"))
			continue
		}
		if !gjson.ValidBytes(payload) {
			continue
		}
		fields := gjson.GetManyBytes(payload, "error", "usage", "choices", "model")
		if fields[0].Exists() {
			write(event(payload))
			continue
		}
		out := payload
		if u := usageOf(fields[1]); u != nil {
			usage = u
			if !clientWantsUsage {
				if c := fields[2]; !c.Exists() || c.Type == gjson.Null || (c.IsArray() && len(c.Array()) == 0) {
					continue // the usage-only chunk the client did not ask for
				}
			}
		}
		if !clientWantsUsage && fields[1].Exists() {
			out, _ = sjson.DeleteBytes(out, "usage")
		}
		if fields[3].Exists() {
			out, _ = sjson.SetRawBytes(out, "model", modelJSON)
		}
		write(event(out))
	}
	if err := sc.Err(); err != nil || !sawDone {
		end()
		msg := "The model provider's stream ended before it was complete."
		if errors.Is(err, bufio.ErrTooLong) {
			msg = "The model provider sent an event larger than this server accepts."
		}
		ev, _ := json.Marshal(map[string]any{"error": map[string]string{
			"message": msg, "type": "server_error", "code": "upstream_stream_error"}})
		write(event(ev))
	}
	return usage
}

// appendSSE appends payload framed as one server-sent event.
func appendSSE(b, payload []byte) []byte {
	b = append(b, "data: "...)
	b = append(b, payload...)
	return append(b, '\n', '\n')
}
