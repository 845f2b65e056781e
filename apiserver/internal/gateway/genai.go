package gateway

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/svc-dev/svc/apiserver/internal/metering"
)

// genAI puts the OpenTelemetry GenAI semantic-convention attributes on the
// request's server span (x.ctx carries it): the operation, the model asked
// for and the upstream model that answered, and the token usage (cached
// tokens on their own, as the conventions' cache_read / cache_creation
// counts, which are part of the input tokens). Called only with tracing on.
func genAI(x *exchange, u *metering.Usage) {
	span := trace.SpanFromContext(x.ctx)
	attrs := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "chat"),
		attribute.String("gen_ai.provider.name", "openai"),
		attribute.String("gen_ai.request.model", x.req.Model),
		attribute.String("svc.model", x.model.ID),
		attribute.String("svc.wire_format", x.codec.name()),
	}
	if x.responseModel != "" {
		attrs = append(attrs, attribute.String("gen_ai.response.model", x.responseModel))
	}
	if u != nil {
		attrs = append(attrs, attribute.Int64("gen_ai.usage.input_tokens", u.PromptTokens),
			attribute.Int64("gen_ai.usage.output_tokens", u.CompletionTokens),
			attribute.Int64("gen_ai.usage.cache_read.input_tokens", u.CachedTokens),
			attribute.Int64("gen_ai.usage.cache_creation.input_tokens", u.CacheWriteTokens))
	}
	span.SetAttributes(attrs...)
}
