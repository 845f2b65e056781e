package main

import (
	"testing"

	"github.com/svc-dev/svc/shared/cli"
)

// No verb, an unknown one (a typo of serve) and -h of the binary are usage
// errors; a verb's -h lists its settings and is one too, as before.
func TestRunRefusesUnknownCommands(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{nil, {"sreve"}, {"--help"}, {"serve", "-h"}, {"paired", "--help"}} {
		if code := run(args); code != cli.ExitUsage {
			t.Errorf("run(%q) = %d, want %d", args, code, cli.ExitUsage)
		}
	}
}
