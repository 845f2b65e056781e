package codecheck_test

import (
	"testing"

	"github.com/svc-dev/svc/shared/wire/codecheck"
)

// TestErrorVocabulary holds the shared module to the one error vocabulary
// (docs/errors.md), without exceptions: the wire package's own errors and
// the local object store's presigned-URL server are checked like the rest.
func TestErrorVocabulary(t *testing.T) {
	t.Parallel()
	got, err := codecheck.Check("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range got {
		t.Error(v)
	}
}
