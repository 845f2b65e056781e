package gateway

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/svc-dev/svc/apiserver/internal/catalog"
)

var editObjects = []string{
	`{"model":"gpt-4o","messages":[{"role":"user","content":"x"}]}`,
	`{"messages":[{"role":"user","content":"model"}],"model":"up-2","stream":true}`,
	`{ "model" : "a" , "stream": true }`,
	`{"id":"c1","object":"chat.completion","model":"upstream-model-name","choices":[],"usage":{"prompt_tokens":1}}`,
	`{"nested":{"model":"inner"},"model":"outer"}`,
	`{"model":null,"x":1}`,
	`{"model":17}`,
	`{"model":{"a":1}}`,
	`{"x":1}`,
	`{}`,
	"{\"x\":1 }\n",
	`{"model":"esc\"aped","stream":true,"stream_options":{"a":1}}`,
	`{"stream_options":null,"model":"m"}`,
	`{"model":"m","stream_options":3}`,
	`{"reasoning_effort":"low","model":"m","stream":true}`,
	`{"messages":[{"role":"user","content":"ünï \\u00e9"}],"stream":true,"model":"m"}`,
	`{"model":"m","model":"n"}`,
	`{"model":"m","nested":{"stream_options":{},"reasoning_effort":"x"}}`,
	`{"model":"m",}`,
}

// setTopString writes what sjson.SetBytes writes.
func TestSetTopStringMatchesSjson(t *testing.T) {
	for _, obj := range editObjects {
		for _, val := range []string{"svc-2-0", "", "up-2", "upstream-model-name", "a<b>&c", "quo\"te", "back\\slash", "ünï", "tab\t"} {
			want, wantErr := sjson.SetBytes([]byte(obj), "model", val)
			for _, inPlace := range []bool{false, true} {
				in := []byte(obj)
				got, err := setTopString(in, "model", val, inPlace, 8)
				if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
					t.Errorf("%s model=%q in place %v: got %s (%v), want %s (%v)", obj, val, inPlace, got, err, want, wantErr)
				}
				if !inPlace && string(in) != obj {
					t.Errorf("%s model=%q: the object was written to: %s", obj, val, in)
				}
			}
		}
	}
}

// upstreamBodyBySjson is upstreamBody as sjson's edits alone write it.
func upstreamBodyBySjson(r *chatRequest, m catalog.Model, model string) ([]byte, error) {
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

func TestUpstreamBodyMatchesSjson(t *testing.T) {
	models := []catalog.Model{{ID: "svc-2-0"}, {ID: "svc-r", ReasoningEffort: "high"}, {ID: "svc-q", ReasoningEffort: "qu\"ote"}}
	for _, obj := range editObjects {
		for _, m := range models {
			for _, up := range []string{"", "up", "a-much-longer-upstream-model-name", "quo\"te"} {
				for _, stream := range []bool{false, true} {
					for _, passthrough := range []bool{false, true} {
						// The top level as the checking pass read it
						// (parse), or read by editTop itself.
						for _, checked := range []bool{false, true} {
							r := &chatRequest{body: []byte(obj), Stream: stream, passthrough: passthrough}
							if checked {
								var f chatFields
								gjson.Parse(obj).ForEach(func(k, v gjson.Result) bool { f.see(k.Str, v); return true })
								r.top, r.top.read = f.top, true
							}
							want, wantErr := upstreamBodyBySjson(r, m, up)
							got, err := r.upstreamBody(m, up)
							if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
								t.Errorf("%s %+v up %q stream %v passthrough %v checked %v:\n got %s (%v)\nwant %s (%v)",
									obj, m, up, stream, passthrough, checked, got, err, want, wantErr)
							}
							if string(r.body) != obj {
								t.Errorf("%s: the client's body was written to: %s", obj, r.body)
							}
						}
					}
				}
			}
		}
	}
}

// The client's body stays as it is when a deployment's body is built
// from it twice, and the first body is not written by the second.
func TestUpstreamBodiesIndependent(t *testing.T) {
	body := []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`)
	r := &chatRequest{body: append(make([]byte, 0, 512), body...), Stream: true}
	first, err := r.upstreamBody(catalog.Model{ID: "m"}, "u")
	if err != nil {
		t.Fatal(err)
	}
	keep := string(first)
	second, err := r.upstreamBody(catalog.Model{ID: "m"}, "v")
	if err != nil {
		t.Fatal(err)
	}
	if string(first) != keep || string(r.body) != string(body) || gjson.GetBytes(second, "model").Str != "v" ||
		!gjson.GetBytes(second, "stream_options.include_usage").Bool() {
		t.Errorf("first %s, second %s, body %s", first, second, r.body)
	}
}

// deleteTopField writes what sjson.DeleteBytes writes.
func TestDeleteTopFieldMatchesSjson(t *testing.T) {
	objs := append([]string{
		`{"id":"c","usage":null,"choices":[{"delta":{"content":"x"}}]}`,
		`{"usage":null,"id":"c"}`,
		`{ "usage" : {"a":1} , "id":"c"}`,
		`{"id":"c", "usage":null }`,
		`{"usage":null}`,
		`{  "usage":null  }`,
		`{"choices":[{"usage":1}],"x":{"usage":2}}`,
		`{"id":"c","usage":[1,2,3],"model":"m"}`,
		`{"us\u0061ge":null,"id":"c"}`,
		`{"id":"c","usageX":1,"usage":2}`,
	}, editObjects...)
	for _, obj := range objs {
		want, _ := sjson.DeleteBytes([]byte(obj), "usage")
		got, ok := deleteTopField(make([]byte, 0, 8), []byte(obj), "usage")
		// Left to sjson only when there is no top-level usage key
		// written plainly.
		plain := gjson.Get(obj, "usage").Exists() && !strings.Contains(obj, `\u`)
		if ok != plain {
			t.Errorf("%s: deleted %v, want %v", obj, ok, plain)
		}
		if ok && !bytes.Equal(got, want) {
			t.Errorf("%s: got %s, want %s", obj, got, want)
		}
	}
}

// A client's usual body takes editTop's one pass, stream or not, with or
// without the model's reasoning option (the cases above check its bytes).
func TestEditTopTakesUsualBodies(t *testing.T) {
	for _, body := range []string{
		`{"model":"svc-2-0","messages":[{"role":"user","content":"x"}]}`,
		`{"model":"svc-2-0","stream":true,"messages":[{"role":"user","content":"x"}],"reasoning_effort":"low"}`,
	} {
		for _, stream := range []bool{false, true} {
			for _, effort := range []string{"", "medium"} {
				r := &chatRequest{body: []byte(body), Stream: stream}
				if _, ok := r.editTop("up-2", effort); !ok {
					t.Errorf("%s stream %v effort %q: not edited in one pass", body, stream, effort)
				}
				// A parsed body's edits need no pass of their own.
				p, err := parseChat(&chatRequest{body: []byte(body)})
				if err != nil || !p.top.read {
					t.Fatalf("%s: parsed %+v, %v; want its top level read", body, p, err)
				}
			}
		}
	}
}

// jsonString writes what json.Marshal writes.
func TestJSONStringMatchesMarshal(t *testing.T) {
	for _, s := range []string{"", "svc-2-0", "gpt-4o/mini:latest", "quo\"te", "back\\slash", "a<b>&c", "tab\t", "ünï", "\x7f", "~ok~"} {
		want, _ := json.Marshal(s)
		if got := jsonString(s); !bytes.Equal(got, want) {
			t.Errorf("jsonString(%q) = %s, want %s", s, got, want)
		}
	}
}
