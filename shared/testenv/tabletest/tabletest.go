// Package tabletest ends the cases of table tests whose rows either want
// an error or check a result.
package tabletest

import (
	"strings"
	"testing"
)

// Check fails t unless, with wantErr set, err contains it, or, with wantErr
// empty, err is nil and ok(got) holds.
func Check[T any](t testing.TB, got T, err error, wantErr string, ok func(T) bool) {
	t.Helper()
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("err %v, want %q", err, wantErr)
		}
		return
	}
	if err != nil || !ok(got) {
		t.Fatalf("got %+v, err %v", got, err)
	}
}

// CheckParse runs parse (named what in failures) on each valid input, which
// must give its value, and on each invalid one, which must fail with the
// zero value.
func CheckParse[T comparable](t testing.TB, what string, parse func(string) (T, error), valid map[string]T, invalid ...string) {
	t.Helper()
	var zero T
	for in, want := range valid {
		if got, err := parse(in); err != nil || got != want {
			t.Errorf("%s(%q) = %v, %v; want %v", what, in, got, err, want)
		}
	}
	for _, in := range invalid {
		if got, err := parse(in); err == nil || got != zero {
			t.Errorf("%s(%q) = %v, %v; want an error", what, in, got, err)
		}
	}
}
