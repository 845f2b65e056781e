package gateway

import (
	"encoding/json"
	"net/http"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/svc-dev/svc/apiserver/internal/metering"
)

// responsesNativeCodec passes a Responses request through to a provider
// declared Responses-native in the models file (its /responses): the body
// goes as the client sent it with the deployment's model, the answer and
// the events come back as the provider sent them with the public model id.
// The pipeline (keys, plans, windows, rate limits, fallbacks, metering) is
// the same; the admission picks this codec in place of responsesCodec.
type responsesNativeCodec struct{}

func (responsesNativeCodec) name() string { return "responses" }

func (responsesNativeCodec) decode(r *http.Request, maxBody int64) (*chatRequest, error) {
	return responsesCodec{}.decode(r, maxBody)
}

func (responsesNativeCodec) answer(_ *exchange, completion []byte) ([]byte, error) {
	return completion, nil
}

func (responsesNativeCodec) usage(completion []byte) *metering.Usage {
	return responsesUsageOf(gjson.GetBytes(completion, "usage"))
}

func (responsesNativeCodec) stream(x *exchange) streamEncoder {
	return &nativeStream{modelJSON: jsonString(x.model.ID)}
}

// responsesUsageOf reads a Responses usage object; nil when absent.
func responsesUsageOf(u gjson.Result) *metering.Usage {
	if !u.IsObject() {
		return nil
	}
	return &metering.Usage{PromptTokens: u.Get("input_tokens").Int(), CompletionTokens: u.Get("output_tokens").Int(),
		ReasoningTokens: u.Get("output_tokens_details.reasoning_tokens").Int(),
		CachedTokens:    u.Get("input_tokens_details.cached_tokens").Int()}
}

// nativeStream relays a Responses event stream: each event under its own
// type, the response's model rewritten, the usage read from the last
// response event. A Responses stream has no [DONE]: it is complete when a
// terminal event (response.completed, .incomplete, .failed) was seen.
type nativeStream struct {
	modelJSON []byte
	ended     bool
}

func (n *nativeStream) chunk(s *sink, payload []byte) *metering.Usage {
	f := gjson.GetManyBytes(payload, "type", "response.model", "response.usage")
	out := payload
	if f[1].Exists() {
		out, _ = sjson.SetRawBytes(out, "response.model", n.modelJSON)
	}
	var u *metering.Usage
	switch f[0].Str {
	case "response.completed", "response.incomplete", "response.failed":
		n.ended = true
		u = responsesUsageOf(f[2])
	}
	s.emit(f[0].Str, out)
	return u
}

func (n *nativeStream) done(*sink) {}

func (n *nativeStream) fail(s *sink, msg string) {
	if n.ended {
		return
	}
	n.ended = true
	b, _ := json.Marshal(map[string]any{"type": "error", "code": "upstream_stream_error", "message": msg, "param": nil})
	s.emit("error", b)
}
