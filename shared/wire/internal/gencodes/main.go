// Command gencodes writes codes_gen.go: one Go constant per error code of
// wire.Codes (CodeInvalidAPIKey = "invalid_api_key"), so a code written as
// a constant is checked by the compiler. Run by `go generate ./wire` in
// shared; wire's TestGeneratedCodes fails when the file is stale.
package main

import (
	"fmt"
	"os"

	"github.com/svc-dev/svc/shared/wire/internal/codegen"
)

func main() {
	out := "codes_gen.go"
	if len(os.Args) > 1 {
		out = os.Args[1]
	}
	if err := os.WriteFile(out, codegen.Source(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gencodes:", err)
		os.Exit(1)
	}
}
