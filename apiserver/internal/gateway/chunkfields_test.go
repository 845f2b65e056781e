package gateway

import (
	"testing"

	"github.com/tidwall/gjson"
)

// TestChunkFieldsOf checks the one-pass read against gjson.Get of each
// field, which the stream encoder used before.
func TestChunkFieldsOf(t *testing.T) {
	for _, js := range []string{
		`{"id":"c","object":"chat.completion.chunk","model":"up-2","choices":[{"index":0,"delta":{"content":"hi"}}],"usage":null}`,
		`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5},"model":"up-2"}`,
		`{"error":{"message":"overloaded","model":"x"}}`,
		`{"model":"a","model":"b","usage":1,"usage":2}`,
		`{"m\u006fdel":"escaped","choices":null}`,
		`{ "model" : "spaced" , "choices" : [ {"usage":{}} ] }`,
		`{"nested":{"model":"no","error":1},"choices":[{"model":"no"}]}`,
		`{}`,
		`[{"model":"in an array"}]`,
		`"model"`,
		`42`,
		`null`,
	} {
		f := chunkFieldsOf(js)
		for _, c := range []struct {
			name string
			got  gjson.Result
		}{{"error", f.err}, {"usage", f.usage}, {"choices", f.choices}, {"model", f.model}} {
			want := gjson.Get(js, c.name)
			if c.got.Exists() != want.Exists() || c.got.Raw != want.Raw || c.got.Index != want.Index {
				t.Errorf("%s: %s = %q at %d, gjson.Get gives %q at %d", js, c.name, c.got.Raw, c.got.Index, want.Raw, want.Index)
			}
		}
	}
}
