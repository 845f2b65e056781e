package podagent_test

import (
	"testing"

	"github.com/svc-dev/svc/shared/wire/codecheck"
)

// Every error code the podagent answers is declared once in wire.Codes with its
// status and type, and nothing chooses a status beside a code or writes a
// plain-text error (docs/errors.md).
func TestErrorVocabulary(t *testing.T) {
	t.Parallel()
	got, err := codecheck.Check(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range got {
		t.Error(v)
	}
}
