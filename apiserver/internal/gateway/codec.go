package gateway

import (
	"net/http"

	"github.com/tidwall/gjson"

	"github.com/svc-dev/svc/apiserver/internal/metering"
)

// codec is one wire format of the completion pipeline (complete): it
// decodes the client's request into the internal form — a chat-completions
// request, which is what every upstream is sent — and encodes the
// upstream's chat-completions answer, stream and errors in its own format.
// Auth, plans, tiers, windows, rate limits, routing, metering and traces
// are the pipeline's and the same for every codec.
type codec interface {
	// decode reads and validates the client's body into the chat form.
	decode(r *http.Request, maxBody int64) (*chatRequest, error)
	// answer encodes a non-streamed chat completion (valid JSON, model
	// already the public id) as the client's answer body.
	answer(x *exchange, completion []byte) ([]byte, error)
	// stream returns the encoder of one streamed answer.
	stream(x *exchange) streamEncoder
	// name names the wire format in traces.
	name() string
	// usage reads the usage of a non-streamed answer (nil: none).
	usage(completion []byte) *metering.Usage
}

// chatCodec is the OpenAI chat-completions wire format, the internal form
// itself: the request is forwarded as the client sent it (a few fields
// edited), the answer and the chunks relayed with the public model id.
type chatCodec struct{}

func (chatCodec) decode(r *http.Request, maxBody int64) (*chatRequest, error) {
	return parseChatRequest(r, maxBody)
}

func (chatCodec) answer(_ *exchange, completion []byte) ([]byte, error) { return completion, nil }

func (chatCodec) stream(x *exchange) streamEncoder {
	return newChatStream(x.model.ID, x.req.IncludeUsage)
}

func (chatCodec) name() string { return "chat.completions" }

// usage of a chat completion: every translating codec's upstream answers
// in the chat form.
func (chatCodec) usage(completion []byte) *metering.Usage {
	return usageOf(gjson.GetBytes(completion, "usage"))
}

func (responsesCodec) usage(completion []byte) *metering.Usage {
	return chatCodec{}.usage(completion)
}

func (messagesCodec) usage(completion []byte) *metering.Usage {
	return chatCodec{}.usage(completion)
}
