package wire_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/svc-dev/svc/shared/wire"
	"github.com/svc-dev/svc/shared/wire/internal/codegen"
)

// codes_gen.go holds one constant per code of the table, as the generator
// writes it today: a code added to Codes without `go generate ./wire` fails
// here.
func TestGeneratedCodes(t *testing.T) {
	t.Parallel()
	got, err := os.ReadFile("codes_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, codegen.Source()) {
		t.Fatal("codes_gen.go is stale: run `go generate ./wire` in shared")
	}
	if wire.CodeInvalidAPIKey != "invalid_api_key" || wire.CodeFenced != "fenced" || codegen.Name("invalid_oid") != "CodeInvalidOID" {
		t.Fatal("constant names do not follow the codes")
	}
}
