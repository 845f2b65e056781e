package gateway

import (
	"testing"

	"github.com/tidwall/gjson"
)

// fieldCases are JSON texts whose top-level fields chunkFieldsOf and usageOf
// read: chunks as providers send them and the shapes that tell a walk of
// the top level from gjson's (repeats, escapes, spacing, nesting, strings
// holding quotes and brackets, numbers of every form).
var fieldCases = []string{
	`{"id":"c","object":"chat.completion.chunk","created":1795930766,"model":"up-2","choices":[{"index":0,"delta":{"content":"hi"}}],"usage":null}`,
	`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5},"model":"up-2"}`,
	`{"error":{"message":"overloaded","model":"x"}}`,
	`{"model":"a","model":"b","usage":1,"usage":2}`,
	`{"m\u006fdel":"escaped","choices":null}`,
	`{"model":"x","us\u0061ge":{"prompt_tokens":1}}`,
	`{ "model" : "spaced" , "choices" : [ {"usage":{}} ] }`,
	"{\n\t\"model\"\r\n:\t\"tabs\",\"usage\":{ \"prompt_tokens\" : 7 }\n}",
	`{"nested":{"model":"no","error":1},"choices":[{"model":"no"}]}`,
	`{"content":"a \"quoted\" } ] { [ , : string\\","model":"after"}`,
	`{"content":"ends in a backslash \\\\","model":"m"}`,
	`{"model":"\u00e9\n\"x\"","choices":[[],{},[{"a":[1,2,{"b":"]}"}]}]]}`,
	`{"created":-1.5e+10,"model":true,"choices":false,"error":null}`,
	`{"usage":{"prompt_tokens":12.7,"completion_tokens":"34","completion_tokens_details":{"reasoning_tokens":9007199254740993},"prompt_tokens_details":{"cached_tokens":-0,"cache_write_tokens":1e3}}}`,
	`{"usage":{"prompt_tokens":1,"prompt_tokens":2,"completion_tokens_details":null,"prompt_tokens_details":[{"cached_tokens":4}]}}`,
	`{"usage":{"completion_tokens_details":{"reasoning_tokens":5,"reasoning_tokens":6},"completion_tokens_details":{"reasoning_tokens":7}}}`,
	`{"usage":{"prompt_tokens_details":{"c\u0061ched_tokens":8},"prompt_tokens":123456789012345678}}`,
	`{"usage":{"prompt_tokens":999999999999999,"completion_tokens":1000000000000000}}`,
	`{"usage":{"prompt_tokens_details":{},"prompt_tokens_details":{"cache_write_tokens":1}}}`,
	`{"usage":{"prompt_tokens_details":[{"cached_tokens":2}],"prompt_tokens_details":"x","prompt_tokens_details":{"cached_tokens":3}}}`,
	`{"usage":{"prompt_tokens_details":{"cached_tokens":4},"prompt_tokens_details":{"cached_tokens":5,"cache_write_tokens":6}}}`,
	`{}`,
	`[{"model":"in an array"}]`,
	`"model"`,
	`42`,
	`null`,
}

// checkFields compares chunkFieldsOf and usageOf on js with gjson.Get,
// which the stream encoder and the usage reader used before.
func checkFields(t *testing.T, js string) {
	t.Helper()
	f := chunkFieldsOf(js)
	for _, c := range []struct {
		name string
		got  gjson.Result
	}{{"error", f.err}, {"usage", f.usage}, {"choices", f.choices}, {"model", f.model}} {
		want := gjson.Get(js, c.name)
		if c.got.Exists() != want.Exists() || c.got.Type != want.Type || c.got.Raw != want.Raw ||
			c.got.Index != want.Index || c.got.Str != want.Str {
			t.Errorf("%s: %s = %v %q at %d, gjson.Get gives %v %q at %d", js, c.name,
				c.got.Type, c.got.Raw, c.got.Index, want.Type, want.Raw, want.Index)
		}
	}
	u := gjson.Get(js, "usage")
	got := usageOf(u)
	if !u.IsObject() {
		if got != nil {
			t.Errorf("%s: usage %+v, want none", js, *got)
		}
		return
	}
	want := [5]int64{u.Get("prompt_tokens").Int(), u.Get("completion_tokens").Int(),
		u.Get("completion_tokens_details.reasoning_tokens").Int(),
		u.Get("prompt_tokens_details.cached_tokens").Int(),
		u.Get("prompt_tokens_details.cache_write_tokens").Int()}
	if got == nil || [5]int64{got.PromptTokens, got.CompletionTokens, got.ReasoningTokens,
		got.CachedTokens, got.CacheWriteTokens} != want {
		t.Errorf("%s: usage %+v, gjson.Get gives %v", js, got, want)
	}
}

// TestChunkFieldsOf checks the walk of the top level against gjson.Get of
// each field, positions included.
func TestChunkFieldsOf(t *testing.T) {
	t.Parallel()
	for _, js := range fieldCases {
		checkFields(t, js)
	}
}

// FuzzChunkFields checks chunkFieldsOf and usageOf against gjson.Get on any
// valid JSON (the relay reads only chunks gjson validated), and that other
// text does not make them panic.
func FuzzChunkFields(f *testing.F) {
	for _, js := range fieldCases {
		f.Add(js)
	}
	f.Fuzz(func(t *testing.T, js string) {
		if !gjson.Valid(js) {
			// Never given such text, but it must not panic either.
			_ = chunkFieldsOf(js)
			_ = usageOf(gjson.Result{Type: gjson.JSON, Raw: js})
			return
		}
		checkFields(t, js)
	})
}
