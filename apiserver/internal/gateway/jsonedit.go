package gateway

import (
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Edits of a JSON object's top-level fields on the request path. sjson's
// Set builds its output through a path parser and a fresh buffer on every
// call; the edits every completion makes (its model, a stream's usage
// option) are a value replaced where it stands or a field added at the
// end, which these write with at most one allocation and, for the rest,
// leave to sjson. TestSetTopStringMatchesSjson and
// TestUpstreamBodyMatchesSjson compare the two.

// setTopString returns obj with its top-level field key set to the JSON
// string val, as sjson.SetBytes(obj, key, val) would write it. inPlace
// allows writing into obj itself when the new value is as long as the old
// one; otherwise obj is left as it is, and a new object has room for extra
// more bytes. key must be a plain gjson path (no dots, wildcards or
// escapes).
func setTopString(obj []byte, key, val string, inPlace bool, extra int) ([]byte, error) {
	if !plainJSONString(val) {
		return sjson.SetBytes(obj, key, val)
	}
	js := unsafe.String(unsafe.SliceData(obj), len(obj))
	r := gjson.Get(js, key)
	if !r.Exists() || r.Index <= 0 || r.Index+len(r.Raw) > len(obj) || js[r.Index:r.Index+len(r.Raw)] != r.Raw {
		return sjson.SetBytes(obj, key, val)
	}
	at, end := r.Index, r.Index+len(r.Raw)
	if inPlace && len(r.Raw) == len(val)+2 {
		obj[at] = '"'
		copy(obj[at+1:], val)
		obj[end-1] = '"'
		return obj, nil
	}
	out := make([]byte, 0, len(obj)-len(r.Raw)+len(val)+2+extra)
	out = append(out, obj[:at]...)
	out = append(out, '"')
	out = append(out, val...)
	out = append(out, '"')
	return append(out, obj[end:]...), nil
}

// plainJSONString reports whether s is written in JSON as itself between
// quotes (printable ASCII without a quote or a backslash), which is how
// sjson writes such a string too.
func plainJSONString(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// includeUsageField is the stream option every streamed upstream request
// carries, as a field added at the end of the body's object.
const includeUsageField = `,"stream_options":{"include_usage":true}`

// appendIncludeUsage adds stream_options.include_usage = true to obj when
// obj has no stream_options, as sjson's two edits (SetRawBytes of {}, then
// SetBytes of the option) would write it: at the end of the object. ok is
// false when obj has the field or does not end plainly (a closing brace
// right after a value), for sjson to do. obj is appended to only when it
// is not orig's array.
func appendIncludeUsage(obj, orig []byte) (out []byte, ok bool) {
	n := len(obj)
	if n < 3 || obj[n-1] != '}' {
		return obj, false
	}
	switch obj[n-2] {
	case ' ', '\t', '\n', '\r', '{', ',':
		return obj, false
	}
	if gjson.Get(unsafe.String(unsafe.SliceData(obj), n), "stream_options").Exists() {
		return obj, false
	}
	if len(orig) > 0 && unsafe.SliceData(obj) == unsafe.SliceData(orig) {
		obj = append(make([]byte, 0, n+len(includeUsageField)), obj...)
	}
	out = append(obj[:n-1], includeUsageField...)
	return append(out, '}'), true
}

// deleteTopField appends to dst obj without its top-level field key, as
// sjson.DeleteBytes(obj, key) writes it (the comma before the field goes
// with it; for the first field, the comma after it). ok is false when obj
// has no such field or its key is not written plainly (left to sjson).
func deleteTopField(dst, obj []byte, key string) (out []byte, ok bool) {
	js := unsafe.String(unsafe.SliceData(obj), len(obj))
	from, to, ok := topFieldSpan(js, key, gjson.Get(js, key))
	if !ok {
		return dst, false
	}
	return append(append(dst, obj[:from]...), obj[to:]...), true
}

// topFieldSpan is the span [from, to) of js that sjson.DeleteBytes(js, key)
// removes, given the field's value r as gjson.Get(js, key) finds it: the
// key, its value and the comma before them (for the first field, the comma
// after them). ok is false when r is not there or the key is not written
// plainly.
func topFieldSpan(js, key string, r gjson.Result) (from, to int, ok bool) {
	end := r.Index + len(r.Raw)
	if !r.Exists() || r.Index <= 0 || end > len(js) || js[r.Index:end] != r.Raw {
		return 0, 0, false
	}
	i := skipSpaceBack(js, r.Index-1)
	if i < 0 || js[i] != ':' {
		return 0, 0, false
	}
	i = skipSpaceBack(js, i-1) // the key's closing quote
	k := i - len(key) - 1      // its opening quote
	if k < 1 || js[i] != '"' || js[k] != '"' || js[k+1:i] != key {
		return 0, 0, false
	}
	if i = skipSpaceBack(js, k-1); i < 0 {
		return 0, 0, false
	}
	switch js[i] {
	case ',':
		return i, end, true
	case '{':
		j := end
		for j < len(js) && js[j] <= ' ' {
			j++
		}
		if j < len(js) && js[j] == ',' {
			end = j + 1
		}
		return i + 1, end, true
	}
	return 0, 0, false
}

// skipSpaceBack is the index of the last byte of js at or before i that
// is not white space (-1: none).
func skipSpaceBack(js string, i int) int {
	for i >= 0 && js[i] <= ' ' {
		i--
	}
	return i
}
