package main

import (
	"testing"

	"github.com/svc-dev/svc/shared/settings"
)

// The other programs know the metal host's variables: its entry in the
// catalogue of programs is its table.
func TestProgramsListTheTable(t *testing.T) {
	t.Parallel()
	if err := settings.ProgramDrift("metalhost", settings.EnvNames(options)); err != nil {
		t.Fatal(err)
	}
}
