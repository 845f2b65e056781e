package publicapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"

	"github.com/svc-dev/svc/apiserver/internal/apierr"
	"github.com/svc-dev/svc/apiserver/internal/catalog"
)

// chatRequest is a parsed completion request. Fields are kept raw so every
// field the client sent is forwarded upstream unchanged.
type chatRequest struct {
	fields       map[string]json.RawMessage
	Model        string
	Stream       bool
	IncludeUsage bool // the client asked for the usage chunk
}

// parseChatRequest reads and validates the body (spec 2.2): JSON object,
// model a non-empty string, messages a non-empty array of objects with a
// string role.
func parseChatRequest(r *http.Request, maxBody int64) (*chatRequest, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return nil, apierr.BadRequest("invalid_content_type", "Content-Type must be application/json.")
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, apierr.New(http.StatusRequestEntityTooLarge, apierr.TypeInvalidRequest, "request_too_large",
				"Request body is larger than the limit of this server.")
		}
		return nil, apierr.BadRequest("invalid_body", "Could not read the request body.")
	}
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&fields); err != nil || fields == nil || dec.More() {
		return nil, apierr.BadRequest("invalid_json", "Request body must be a JSON object.")
	}
	req := &chatRequest{fields: fields}
	raw, ok := fields["model"]
	if !ok || json.Unmarshal(raw, &req.Model) != nil || req.Model == "" {
		return nil, apierr.BadRequest("invalid_model", "'model' is required and must be a non-empty string.")
	}
	var msgs []map[string]json.RawMessage
	if raw, ok := fields["messages"]; !ok || json.Unmarshal(raw, &msgs) != nil || len(msgs) == 0 {
		return nil, apierr.BadRequest("invalid_messages", "'messages' is required and must be a non-empty array of message objects.")
	}
	for _, m := range msgs {
		var role string
		if m == nil || json.Unmarshal(m["role"], &role) != nil || role == "" {
			return nil, apierr.BadRequest("invalid_messages", "Each message must be an object with a string 'role'.")
		}
	}
	if raw, ok := fields["stream"]; ok && string(raw) != "null" {
		if json.Unmarshal(raw, &req.Stream) != nil {
			return nil, apierr.BadRequest("invalid_stream", "'stream' must be a boolean.")
		}
	}
	if raw, ok := fields["stream_options"]; ok {
		var so struct {
			IncludeUsage bool `json:"include_usage"`
		}
		if json.Unmarshal(raw, &so) != nil {
			return nil, apierr.BadRequest("invalid_stream_options", "'stream_options' must be an object.")
		}
		req.IncludeUsage = so.IncludeUsage
	}
	return req, nil
}

// upstreamBody is the body sent to the provider: the client's fields with the
// upstream model name, reasoning enabled as the models file says, and usage
// requested on streams (spec 9; DESIGN.md §6).
func (r *chatRequest) upstreamBody(m catalog.Model) ([]byte, error) {
	out := make(map[string]json.RawMessage, len(r.fields)+2)
	for k, v := range r.fields {
		out[k] = v
	}
	model := m.UpstreamModel
	if model == "" {
		model = m.ID
	}
	out["model"], _ = json.Marshal(model)
	if _, set := out["reasoning_effort"]; !set && m.ReasoningEffort != "" {
		out["reasoning_effort"], _ = json.Marshal(m.ReasoningEffort)
	}
	if r.Stream {
		so := map[string]json.RawMessage{}
		if raw, ok := r.fields["stream_options"]; ok {
			_ = json.Unmarshal(raw, &so)
		}
		so["include_usage"] = json.RawMessage("true")
		out["stream_options"], _ = json.Marshal(so)
	}
	return json.Marshal(out)
}
