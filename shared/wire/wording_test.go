package wire_test

import (
	"regexp"
	"testing"

	"github.com/svc-dev/svc/shared/wire"
)

// What users read speaks their language: no default message of the table
// cites a section of the specification.
func TestMessagesCiteNoSpecSections(t *testing.T) {
	t.Parallel()
	cite := regexp.MustCompile(`(?i)\bspec\s+[0-9]|§\s*[0-9]`)
	for code, spec := range wire.Codes {
		if cite.MatchString(spec.Message) {
			t.Errorf("%s: message %q cites the specification", code, spec.Message)
		}
	}
}
