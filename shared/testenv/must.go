package testenv

import "testing"

// Must fails the test at once on a non-nil err: for set-up steps whose
// failure leaves nothing to check.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
