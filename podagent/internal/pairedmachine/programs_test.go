package pairedmachine

import (
	"testing"

	"github.com/svc-dev/svc/shared/settings"
)

// The other programs know paired mode's own variables: its entry in the
// catalogue of programs is its table.
func TestProgramsListTheTable(t *testing.T) {
	t.Parallel()
	if err := settings.ProgramDrift("podagent paired", settings.EnvNames(pairedOptions())); err != nil {
		t.Fatal(err)
	}
}
