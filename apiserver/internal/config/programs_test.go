package config_test

import (
	"strings"
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

// `apiserver serve -h` (and `apiserver help serve`) lists every setting with
// its variable.
func TestHelpListsEverySetting(t *testing.T) {
	t.Parallel()
	h := config.Help()
	for _, name := range config.EnvNames() {
		if !strings.Contains(h, name) {
			t.Errorf("help lacks %s", name)
		}
	}
}
