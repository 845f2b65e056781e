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
