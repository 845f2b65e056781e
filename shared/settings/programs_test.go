package settings_test

import (
	"strings"
	"testing"

	"github.com/svc-dev/svc/shared/settings"
	"github.com/svc-dev/svc/shared/testenv"
)

// The binaries know the harness's variables as another program's: the
// catalogue of programs lists exactly testenv.ToolVariables for it.
func TestToolVariables(t *testing.T) {
	t.Parallel()
	if err := settings.ProgramDrift("the test harness", testenv.ToolVariables); err != nil {
		t.Fatal(err)
	}
}

// ProgramDrift passes on the same names in any order and, on a difference,
// gives the entry to paste.
func TestProgramDrift(t *testing.T) {
	t.Parallel()
	names := settings.Programs["metalhost"]
	if len(names) == 0 {
		t.Fatal("no metalhost entry")
	}
	reversed := make([]string, len(names))
	for i, n := range names {
		reversed[len(names)-1-i] = n
	}
	if err := settings.ProgramDrift("metalhost", reversed); err != nil {
		t.Fatalf("same names refused: %v", err)
	}
	err := settings.ProgramDrift("metalhost", append(reversed, "SVC_METAL_NEW"))
	if err == nil || !strings.Contains(err.Error(), `"SVC_METAL_NEW"`) || !strings.Contains(err.Error(), "programs_names.go") {
		t.Fatalf("ProgramDrift = %v, want the entry to paste with SVC_METAL_NEW", err)
	}
}
