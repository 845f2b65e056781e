package config_test

import (
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/config"
	"github.com/svc-dev/svc/shared/settings"
)

// The other programs know the API server's variables: its entry in the
// catalogue of programs is its table.
func TestProgramsListTheTable(t *testing.T) {
	t.Parallel()
	if err := settings.ProgramDrift("apiserver", config.EnvNames()); err != nil {
		t.Fatal(err)
	}
}
