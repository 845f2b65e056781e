package gateway

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/svc-dev/svc/shared/wire"
)

// duplicateKey finds the same key as a plain map over every top-level key
// does, for small objects, objects past the pairwise limit, escaped keys
// and nested repeats (which are not top-level duplicates).
func TestDuplicateKeyAgainstMap(t *testing.T) {
	t.Parallel()
	many := func(n int, extra string) string {
		var b strings.Builder
		b.WriteString("{")
		for i := range n {
			fmt.Fprintf(&b, `"k%d":%d,`, i, i)
		}
		b.WriteString(extra + `"last":true}`)
		return b.String()
	}
	for _, tc := range []struct {
		name, body, dup string
		found           bool
	}{
		{"none", `{"model":"m","messages":[]}`, "", false},
		{"repeat", `{"model":"m","stream":true,"model":"n"}`, "model", true},
		{"escaped repeat", `{"model":"m","mod\u0065l":"n"}`, "model", true},
		{"nested repeats are not top-level", `{"a":{"x":1,"x":2},"b":[{"y":1},{"y":2}]}`, "", false},
		{"empty key twice", `{"":1,"":2}`, "", true},
		{"first key repeated past the pairwise limit", many(smallObject+5, `"k0":1,`), "k0", true},
		{"repeat at the limit", many(smallObject-1, `"k3":1,`), "k3", true},
		{"large without repeats", many(3*smallObject, ""), "", false},
		{"large, repeat of a late key", many(3*smallObject, `"k90":1,`), "k90", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !gjson.Valid(tc.body) {
				t.Fatalf("test body is not JSON: %s", tc.body)
			}
			// The reference: every key into a map.
			want, wantFound, seen := "", false, map[string]bool{}
			gjson.Parse(tc.body).ForEach(func(k, _ gjson.Result) bool {
				if seen[k.Str] {
					want, wantFound = k.Str, true
					return false
				}
				seen[k.Str] = true
				return true
			})
			got, found := duplicateKey(gjson.Parse(tc.body), nil)
			if got != want || found != wantFound || got != tc.dup || found != tc.found {
				t.Fatalf("duplicateKey = %q, %v; the map finds %q, %v; want %q, %v", got, found, want, wantFound, tc.dup, tc.found)
			}
		})
	}
}

// The body is read whole whether its Content-Length is declared, absent or
// wrong, and a body over the limit is request_too_large, never truncated.
func TestReadJSONBodyLengths(t *testing.T) {
	t.Parallel()
	body := `{"model":"m","messages":[{"role":"user","content":"hello"}]}`
	for _, tc := range []struct {
		name   string
		length int64
		max    int64
		code   string
	}{
		{"declared", int64(len(body)), 1 << 20, ""},
		{"unknown length", -1, 1 << 20, ""},
		{"exactly the limit", int64(len(body)), int64(len(body)), ""},
		{"over the limit, declared", int64(len(body)), int64(len(body)) - 1, "request_too_large"},
		{"over the limit, unknown length", -1, int64(len(body)) - 1, "request_too_large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := post(body, "application/json")
			r.ContentLength = tc.length
			if tc.length < 0 {
				r.Body = io.NopCloser(strings.NewReader(body)) // no length known
			}
			got, err := readJSONBody(r, tc.max)
			var we *wire.Error
			switch {
			case tc.code == "" && (err != nil || string(got) != body):
				t.Fatalf("read %q, %v; want the whole body", got, err)
			case tc.code != "" && (!errors.As(err, &we) || we.Code != tc.code):
				t.Fatalf("err %v, want %s", err, tc.code)
			}
		})
	}
	// A Content-Type other than JSON, with parameters, and malformed.
	for ct, ok := range map[string]bool{"application/json": true, "application/json; charset=utf-8": true,
		"Application/JSON": true, "text/plain": false, "application/json;;": false} {
		_, err := readJSONBody(post(body, ct), 1<<20)
		if (err == nil) != ok {
			t.Fatalf("Content-Type %q: err %v, want accepted %v", ct, err, ok)
		}
	}
	if _, err := readJSONBody(post(`{"a":1,"a":2}`, ""), 1<<20); err == nil || !strings.Contains(err.Error(), "'a' more than once") {
		t.Fatalf("a repeated key: %v", err)
	}
}

// isObject agrees with gjson's parse on valid JSON of every kind.
func TestIsObject(t *testing.T) {
	t.Parallel()
	for _, body := range []string{`{}`, ` {"a":1}`, "\r\n\t{\"a\":[1]}", `[]`, ` [{}]`, `"{"`, `1`, `null`, `true`, ` "x"`} {
		if got, want := isObject([]byte(body)), gjson.Parse(body).IsObject(); got != want {
			t.Fatalf("isObject(%q) = %v, gjson says %v", body, got, want)
		}
	}
	if isObject(nil) || isObject([]byte("  ")) {
		t.Fatal("nothing is not an object")
	}
}

// The fields read in the key check's pass are what gjson.Get reads.
func TestChatFieldsMatchGet(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user"}],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"stream":false,"messages":[],"model":""}`,
		`{"x":{"model":"inner"},"model":"outer","messages":3,"stream":"yes","stream_options":null}`,
		`{"m\u006fdel":"escaped key","model":"plain"}`,
		`{}`,
	} {
		var f chatFields
		gjson.Parse(body).ForEach(func(k, v gjson.Result) bool {
			f.see(k.Str, v)
			return true
		})
		want := gjson.GetMany(body, "model", "messages", "stream", "stream_options")
		for i, got := range []gjson.Result{f.model, f.messages, f.stream, f.streamOptions} {
			if got.Raw != want[i].Raw || got.Index != want[i].Index || got.Type != want[i].Type {
				t.Errorf("%s field %d: got %q at %d, gjson.Get %q at %d", body, i, got.Raw, got.Index, want[i].Raw, want[i].Index)
			}
		}
	}
}
