package config

import (
	"strings"
	"testing"

	"github.com/svc-dev/svc/shared/settings"
)

// The other programs know the pod's variables: its entry in the catalogue
// of programs is its table.
func TestProgramsListTheTable(t *testing.T) {
	t.Parallel()
	if err := settings.ProgramDrift("podagent", EnvNames()); err != nil {
		t.Fatal(err)
	}
}

// One environment for both binaries (a Compose env file, one ConfigMap):
// the API server's variables do not stop the pod, they are returned for the
// debug log; a name no program reads still does, with the nearest name.
func TestCheckEnvironSharedWithTheAPIServer(t *testing.T) {
	t.Parallel()
	foreign, err := CheckEnviron([]string{"SVC_PROJECT_ID=p", "SVC_DATABASE_URL=postgres://x", "SVC_MODELS_FILE=/m"})
	if err != nil || len(foreign) != 2 || foreign[0].Name != "SVC_DATABASE_URL" || foreign[0].Program != "apiserver" {
		t.Fatalf("CheckEnviron = %+v, %v", foreign, err)
	}
	if _, err := CheckEnviron([]string{"SVC_PROJECT_IDD=p"}); err == nil || !strings.Contains(err.Error(), "did you mean SVC_PROJECT_ID?") {
		t.Fatalf("CheckEnviron = %v, want the typo refused", err)
	}
}
