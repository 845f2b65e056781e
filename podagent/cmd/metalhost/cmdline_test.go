package main

import (
	"testing"

	"github.com/svc-dev/svc/shared/cli"
)

// No verb, an unknown one, -h and pipe without its address are usage
// errors.
func TestRunRefusesUnknownCommands(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{nil, {"srv"}, {"-h"}, {"serve", "-h"}, {"pipe"}, {"pipe", "a", "b"}} {
		if code := run(args); code != cli.ExitUsage {
			t.Errorf("run(%q) = %d, want %d", args, code, cli.ExitUsage)
		}
	}
}
