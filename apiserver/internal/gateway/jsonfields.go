package gateway

import (
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// Reading a few top-level fields of JSON that gjson has already validated
// (a stream's chunks, an answer's usage), without gjson's parse of every
// value on the way: gjson.Result.ForEach converts each number it passes
// (a chunk's "created") with strconv.ParseFloat and unescapes each string,
// and each gjson.Get scans the object again. eachField only finds where each
// value starts and ends. TestChunkFieldsOf and FuzzChunkFields compare what is
// read this way with gjson.Get.

// eachField calls visit with each field of the JSON object js, in order:
// its key as written between its quotes and its value's span js[from:to],
// until visit returns false. js must be valid JSON (gjson.Valid). ok is
// false when js is not an object or a key is written with escapes (visit
// may have seen the fields before it): the caller then reads js with gjson.
func eachField(js string, visit func(key string, from, to int) bool) (ok bool) {
	i := skipSpace(js, 0)
	if i >= len(js) || js[i] != '{' {
		return false
	}
	i++
	for {
		if i = skipSpace(js, i); i < len(js) && js[i] == ',' {
			i = skipSpace(js, i+1)
		}
		if i >= len(js) {
			return false
		}
		if js[i] == '}' {
			return true
		}
		if js[i] != '"' {
			return false
		}
		end := stringEnd(js, i)
		if end < 0 || strings.IndexByte(js[i+1:end-1], '\\') >= 0 {
			return false
		}
		key := js[i+1 : end-1]
		if i = skipSpace(js, end); i >= len(js) || js[i] != ':' {
			return false
		}
		from := skipSpace(js, i+1)
		to := valueEnd(js, from)
		if to < 0 {
			return false
		}
		if !visit(key, from, to) {
			return true
		}
		i = to
	}
}

// skipSpace is the index of the first byte of js at or after i that is not
// JSON white space (len(js): none).
func skipSpace(js string, i int) int {
	for i < len(js) && (js[i] == ' ' || js[i] == '\t' || js[i] == '\n' || js[i] == '\r') {
		i++
	}
	return i
}

// stringEnd is the index just past the JSON string that starts at js[i]
// (a quote), -1 when it does not end.
func stringEnd(js string, i int) int {
	for j := i + 1; ; {
		q := strings.IndexByte(js[j:], '"')
		if q < 0 {
			return -1
		}
		q += j
		n := 0 // backslashes right before the quote: an odd count escapes it
		for k := q - 1; k > i && js[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
}

// containerStop marks the bytes a walk through an object or an array stops
// at: strings and nesting.
var containerStop = [256]bool{'"': true, '{': true, '}': true, '[': true, ']': true}

// valueEnd is the index just past the JSON value that starts at js[i], -1
// when it does not end.
func valueEnd(js string, i int) int {
	if i >= len(js) {
		return -1
	}
	switch js[i] {
	case '"':
		return stringEnd(js, i)
	case '{', '[':
		for j, depth := i, 0; ; {
			for j < len(js) && !containerStop[js[j]] {
				j++
			}
			if j >= len(js) {
				return -1
			}
			switch js[j] {
			case '"':
				if j = stringEnd(js, j); j < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			default:
				if depth--; depth == 0 {
					return j + 1
				}
			}
			j++
		}
	}
	j := i // a number or a literal
	for j < len(js) && js[j] != ',' && js[j] != '}' && js[j] != ']' &&
		js[j] != ' ' && js[j] != '\t' && js[j] != '\n' && js[j] != '\r' {
		j++
	}
	return j
}

// valueAt is the value js[from:to] as gjson.Get finds it in js: its
// type, raw text and index (a string's Str, a number's Num).
func valueAt(js string, from, to int) gjson.Result {
	r := gjson.Parse(js[from:to])
	if r.Exists() {
		r.Index = from
	}
	return r
}

// intAt is gjson.Parse(raw).Int() without its float conversion for a
// plain integer of up to 15 digits (always exact in a float64, so the two
// agree); anything else goes to gjson.
func intAt(raw string) int64 {
	if n := len(raw); n > 0 && n <= 15 {
		if v, err := strconv.ParseInt(raw, 10, 64); err == nil && raw[0] != '+' {
			return v
		}
	}
	return gjson.Parse(raw).Int()
}
