package gateway

import (
	"errors"
	"io"
	"mime"
	"net/http"

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
}

// parseChatRequest reads and validates the body (spec 2.2): one JSON object,
// model a non-empty string, messages a non-empty array of objects with a
// string role.
func parseChatRequest(r *http.Request, maxBody int64) (*chatRequest, error) {
	body, err := readJSONBody(r, maxBody)
	if err != nil {
		return nil, err
	}
	return parseChat(&chatRequest{body: body})
}

// readJSONBody reads a request body of at most maxBody bytes that must be
// one JSON object without duplicate keys (every codec's first check).
func readJSONBody(r *http.Request, maxBody int64) ([]byte, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return nil, wire.Coded("invalid_content_type", "Content-Type must be application/json.")
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, wire.Coded("request_too_large",
				"Request body is larger than the limit of this server.")
		}
		return nil, wire.Coded("invalid_body", "Could not read the request body.")
	}
	if !gjson.ValidBytes(body) || !gjson.ParseBytes(body).IsObject() {
		return nil, wire.Coded("invalid_json", "Request body must be a JSON object.")
	}
	// A key given twice could mean one thing to us and another to the
	// upstream (parsers differ on which copy wins): refuse it.
	seen, dup := make(map[string]struct{}, 16), ""
	gjson.ParseBytes(body).ForEach(func(k, _ gjson.Result) bool {
		if _, ok := seen[k.Str]; ok {
			dup = k.Str
			return false
		}
		seen[k.Str] = struct{}{}
		return true
	})
	if dup != "" {
		return nil, wire.Coded("invalid_json", "Request body has the key '"+dup+"' more than once.")
	}
	return body, nil
}

// parseChat validates a chat-completions body already read (readJSONBody).
func parseChat(req *chatRequest) (*chatRequest, error) {
	body := req.body
	fields := gjson.GetManyBytes(body, "model", "messages", "stream", "stream_options")
	if m := fields[0]; m.Type != gjson.String || m.Str == "" {
		return nil, wire.Coded("invalid_model", "'model' is required and must be a non-empty string.")
	}
	req.Model = fields[0].Str
	msgs := fields[1]
	if !msgs.IsArray() || len(msgs.Array()) == 0 {
		return nil, wire.Coded("invalid_messages", "'messages' is required and must be a non-empty array of message objects.")
	}
	ok := true
	msgs.ForEach(func(_, m gjson.Result) bool {
		role := m.Get("role")
		ok = m.IsObject() && role.Type == gjson.String && role.Str != ""
		return ok
	})
	if !ok {
		return nil, wire.Coded("invalid_messages", "Each message must be an object with a string 'role'.")
	}
	switch s := fields[2]; s.Type {
	case gjson.Null:
	case gjson.True, gjson.False:
		req.Stream = s.Bool()
	default:
		return nil, wire.Coded("invalid_stream", "'stream' must be a boolean.")
	}
	if so := fields[3]; so.Exists() {
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
	out, err := sjson.SetBytes(append([]byte(nil), r.body...), "model", model)
	if err != nil || r.passthrough {
		return out, err
	}
	if m.ReasoningEffort != "" && !gjson.GetBytes(out, "reasoning_effort").Exists() {
		if out, err = sjson.SetBytes(out, "reasoning_effort", m.ReasoningEffort); err != nil {
			return nil, err
		}
	}
	if r.Stream {
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
