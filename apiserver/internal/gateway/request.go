package gateway

import (
	"errors"
	"io"
	"mime"
	"net/http"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/shared/wire"
)

// chatRequest is a validated completion request. The body is kept as the
// client sent it: the upstream body is that body with a few fields edited in
// place, so every field the client sent is forwarded unchanged and nothing is
// decoded or re-encoded that does not have to be.
type chatRequest struct {
	body         []byte
	Model        string
	Stream       bool
	IncludeUsage bool // the client asked for the usage chunk
	// The client's request in its own wire format, for a translating
	// codec's answer (nil for chat completions).
	responses *responsesRequest
	messages  *messagesRequest
	// clientBody is a Responses request as the client sent it; passthrough
	// sends it (model edited) to a Responses-native provider.
	clientBody  []byte
	passthrough bool
	// top is what editTop needs of the body's top level, read in the
	// pass that validated it (the body is not written after).
	top topFields
}

// topFields are what the upstream body's edits need of the client body's
// top level: the model's value (its first occurrence, as gjson.Get finds
// it) and whether the body sets the fields the edits add.
type topFields struct {
	read                  bool // filled in by the pass that checked the body
	model                 gjson.Result
	hasEffort, hasOptions bool
}

// see records one top-level field.
func (t *topFields) see(key string, val gjson.Result) {
	switch key {
	case "model":
		if !t.model.Exists() {
			t.model = val
		}
	case "reasoning_effort":
		t.hasEffort = true
	case "stream_options":
		t.hasOptions = true
	}
}

// parseChatRequest reads and validates the body (spec 2.2): one JSON object,
// model a non-empty string, messages a non-empty array of objects with a
// string role. The fields are read in the pass that checks the keys.
func parseChatRequest(r *http.Request, maxBody int64) (*chatRequest, error) {
	var f chatFields
	body, err := readJSONFields(r, maxBody, f.see)
	if err != nil {
		return nil, err
	}
	return f.parse(&chatRequest{body: body})
}

// readJSONBody reads a request body of at most maxBody bytes that must be
// one JSON object without duplicate keys (every codec's first check).
func readJSONBody(r *http.Request, maxBody int64) ([]byte, error) {
	return readJSONFields(r, maxBody, nil)
}

// readJSONFields is readJSONBody that also hands each top-level field, in
// order, to see (when not nil), in the same pass over the object.
func readJSONFields(r *http.Request, maxBody int64, see func(key string, val gjson.Result)) ([]byte, error) {
	// The common exact value needs no parse (ParseMediaType allocates).
	if ct := r.Header.Get("Content-Type"); ct != "" && ct != "application/json" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return nil, wire.Coded("invalid_content_type", "Content-Type must be application/json.")
		}
	}
	body, err := readBody(r, maxBody)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, wire.Coded("request_too_large",
				"Request body is larger than the limit of this server.")
		}
		return nil, wire.Coded("invalid_body", "Could not read the request body.")
	}
	if !gjson.ValidBytes(body) {
		return nil, wire.Coded("invalid_json", "Request body must be a JSON object.")
	}
	if !isObject(body) {
		return nil, wire.Coded("invalid_json", "Request body must be a JSON object.")
	}
	// Read in place, without gjson.ParseBytes's copy of the whole body:
	// the body is never written after this (the upstream body is a copy),
	// so a key read here stays valid.
	root := gjson.Parse(unsafe.String(unsafe.SliceData(body), len(body)))
	// A key given twice could mean one thing to us and another to the
	// upstream (parsers differ on which copy wins): refuse it.
	if dup, ok := duplicateKey(root, see); ok {
		return nil, wire.Coded("invalid_json", "Request body has the key '"+dup+"' more than once.")
	}
	return body, nil
}

// isObject reports whether valid JSON is an object (its first byte past
// white space is '{'), without parsing it again.
func isObject(valid []byte) bool {
	for _, c := range valid {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c == '{'
	}
	return false
}

// readBody reads r's body, at most maxBody bytes (a longer one is a
// *http.MaxBytesError): into one buffer of the declared length when the
// client declared one, else growing as io.ReadAll does.
func readBody(r *http.Request, maxBody int64) ([]byte, error) {
	body := http.MaxBytesReader(nil, r.Body, maxBody)
	if n := r.ContentLength; n > 0 && n <= maxBody {
		// One byte more than declared, so a body longer than its
		// Content-Length (net/http stops it there anyway) is still read
		// to its end as before.
		buf := make([]byte, 0, n+1)
		for {
			m, err := body.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+m]
			if err == io.EOF {
				return buf, nil
			}
			if err != nil {
				return buf, err
			}
			if len(buf) == cap(buf) {
				rest, err := io.ReadAll(body)
				return append(buf, rest...), err
			}
		}
	}
	return io.ReadAll(body)
}

// smallObject is how many keys duplicateKey compares pairwise (a request
// has a dozen top-level keys or so); a larger object uses a map.
const smallObject = 32

// duplicateKey reports the first top-level key of the JSON object obj
// that repeats an earlier one (keys compared unescaped, as parsers read
// them), without allocating for a small object. see, when not nil, is
// given each field before it (up to the repeat).
func duplicateKey(obj gjson.Result, see func(key string, val gjson.Result)) (string, bool) {
	var small [smallObject]string
	keys := small[:0]
	var seen map[string]struct{}
	dup, found := "", false
	obj.ForEach(func(k, v gjson.Result) bool {
		if seen == nil && len(keys) < smallObject {
			for _, prev := range keys {
				if prev == k.Str {
					dup, found = k.Str, true
					return false
				}
			}
			keys = append(keys, k.Str)
		} else {
			if seen == nil {
				seen = make(map[string]struct{}, 2*smallObject)
				for _, prev := range keys {
					seen[prev] = struct{}{}
				}
			}
			if _, ok := seen[k.Str]; ok {
				dup, found = k.Str, true
				return false
			}
			seen[k.Str] = struct{}{}
		}
		if see != nil {
			see(k.Str, v)
		}
		return true
	})
	return dup, found
}

// chatFields are the top-level fields of a chat-completions body that
// routing reads, each at its first occurrence (as gjson.Get finds it).
type chatFields struct {
	model, messages, stream, streamOptions gjson.Result
	top                                    topFields
}

// see records one top-level field (readJSONFields' callback).
func (f *chatFields) see(key string, val gjson.Result) {
	f.top.see(key, val)
	var at *gjson.Result
	switch key {
	case "model":
		at = &f.model
	case "messages":
		at = &f.messages
	case "stream":
		at = &f.stream
	case "stream_options":
		at = &f.streamOptions
	default:
		return
	}
	if !at.Exists() {
		*at = val
	}
}

// parseChat validates a chat-completions body already read (readJSONBody).
func parseChat(req *chatRequest) (*chatRequest, error) {
	var f chatFields
	// In place, as readJSONFields reads: the body is not written after.
	gjson.Parse(unsafe.String(unsafe.SliceData(req.body), len(req.body))).ForEach(func(k, v gjson.Result) bool {
		f.see(k.Str, v)
		return true
	})
	return f.parse(req)
}

// parse validates the fields of req's body (spec 2.2) and sets req's.
func (f *chatFields) parse(req *chatRequest) (*chatRequest, error) {
	if m := f.model; m.Type != gjson.String || m.Str == "" {
		return nil, wire.Coded("invalid_model", "'model' is required and must be a non-empty string.")
	}
	req.Model = f.model.Str
	req.top = f.top
	req.top.read = true
	msgs := f.messages
	if !msgs.IsArray() {
		return nil, wire.Coded("invalid_messages", "'messages' is required and must be a non-empty array of message objects.")
	}
	ok, n := true, 0
	msgs.ForEach(func(_, m gjson.Result) bool {
		n++
		role := m.Get("role")
		ok = m.IsObject() && role.Type == gjson.String && role.Str != ""
		return ok
	})
	if n == 0 {
		return nil, wire.Coded("invalid_messages", "'messages' is required and must be a non-empty array of message objects.")
	}
	if !ok {
		return nil, wire.Coded("invalid_messages", "Each message must be an object with a string 'role'.")
	}
	switch s := f.stream; s.Type {
	case gjson.Null:
	case gjson.True, gjson.False:
		req.Stream = s.Bool()
	default:
		return nil, wire.Coded("invalid_stream", "'stream' must be a boolean.")
	}
	if so := f.streamOptions; so.Exists() {
		if !so.IsObject() {
			return nil, wire.Coded("invalid_stream_options", "'stream_options' must be an object.")
		}
		req.IncludeUsage = so.Get("include_usage").Bool()
	}
	return req, nil
}

// upstreamBody is the body sent to one deployment: the client's body with
// the deployment's upstream model name, reasoning enabled as the models file says, and usage
// requested on streams (spec 9; docs/design.md §6).
func (r *chatRequest) upstreamBody(m catalog.Model, model string) ([]byte, error) {
	if model == "" {
		model = m.ID
	}
	if !r.passthrough {
		if out, ok := r.editTop(model, m.ReasoningEffort); ok {
			return out, nil
		}
	}
	// Room for the usage option a stream adds (below): the body is then
	// allocated once.
	var extra int
	if r.Stream && !r.passthrough {
		extra = len(includeUsageField)
	}
	out, err := setTopString(r.body, "model", model, false, extra)
	if err != nil || r.passthrough {
		return out, err
	}
	if m.ReasoningEffort != "" && !gjson.GetBytes(out, "reasoning_effort").Exists() {
		if out, err = sjson.SetBytes(out, "reasoning_effort", m.ReasoningEffort); err != nil {
			return nil, err
		}
	}
	if r.Stream {
		if out, ok := appendIncludeUsage(out, r.body); ok {
			return out, nil
		}
		if !gjson.GetBytes(out, "stream_options").IsObject() {
			if out, err = sjson.SetRawBytes(out, "stream_options", []byte("{}")); err != nil {
				return nil, err
			}
		}
		if out, err = sjson.SetBytes(out, "stream_options.include_usage", true); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// editTop is upstreamBody's edits in one allocation, from the body's top
// level as the pass that checked it read it (else in one pass of its own),
// for the common body: the model replaced where it stands
// and the fields upstreamBody adds appended at the end of the object, as
// sjson writes them. ok is false when the body needs sjson (no plain model
// field, a stream with its own stream_options, an object that does not end
// plainly, a value that is not a plain string); TestUpstreamBodyMatchesSjson
// compares the two.
func (r *chatRequest) editTop(model, effort string) (out []byte, ok bool) {
	body := r.body
	js := unsafe.String(unsafe.SliceData(body), len(body))
	top := r.top
	if !top.read {
		gjson.Parse(js).ForEach(func(k, v gjson.Result) bool {
			top.see(k.Str, v)
			return true
		})
	}
	mod, hasEffort, hasOptions := top.model, top.hasEffort, top.hasOptions
	at, end := mod.Index, mod.Index+len(mod.Raw)
	if !mod.Exists() || at <= 0 || end > len(js) || js[at:end] != mod.Raw || !plainJSONString(model) {
		return nil, false
	}
	addEffort := effort != "" && !hasEffort
	addUsage := r.Stream
	if (addEffort && !plainJSONString(effort)) || (addUsage && hasOptions) {
		return nil, false
	}
	n := len(body)
	if addEffort || addUsage {
		if n < 3 || body[n-1] != '}' {
			return nil, false
		}
		switch body[n-2] {
		case ' ', '\t', '\n', '\r', '{', ',':
			return nil, false
		}
	}
	size := n - len(mod.Raw) + len(model) + 2
	if addEffort {
		size += len(reasoningEffortField) + len(effort) + 2
	}
	if addUsage {
		size += len(includeUsageField)
	}
	out = make([]byte, 0, size)
	out = append(out, body[:at]...)
	out = append(out, '"')
	out = append(out, model...)
	out = append(out, '"')
	if !addEffort && !addUsage {
		return append(out, body[end:]...), true
	}
	out = append(out, body[end:n-1]...)
	if addEffort {
		out = append(out, reasoningEffortField...)
		out = append(out, '"')
		out = append(out, effort...)
		out = append(out, '"')
	}
	if addUsage {
		out = append(out, includeUsageField...)
	}
	return append(out, '}'), true
}

// reasoningEffortField is the reasoning option a model's deployments get
// when the client set none, as a field added at the end of the object (its
// value follows).
const reasoningEffortField = `,"reasoning_effort":`
