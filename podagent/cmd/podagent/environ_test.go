package main

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/svc-dev/svc/shared/cli"
)

// A mistyped SVC_ variable refuses the start (exit 2, before the workspace
// is touched) and names the setting meant, in serve and paired mode alike.
func TestUnknownVariableRefusesStart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		env  string
		want string
	}{
		{name: "serve", args: []string{"serve"}, env: "SVC_PERSIST_RETRY_MN=1s", want: "SVC_PERSIST_RETRY_MN (did you mean SVC_PERSIST_RETRY_MIN?)"},
		{name: "serve, webhook setting", args: []string{"serve"}, env: "SVC_WEBHOOK_SYNC_TIMOUT=5s", want: "did you mean SVC_WEBHOOK_SYNC_TIMEOUT?"},
		{name: "paired", args: []string{"paired", "--api", "http://127.0.0.1:1", "--token", "t"}, env: "SVC_PAIRING_TOKEN_FIL=/t",
			want: "did you mean SVC_PAIRING_TOKEN_FILE?"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, "fs")
			cmd := exec.Command(podagentBin, tc.args...)
			cmd.Env = append(append([]string{}, e.vars...), tc.env)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != cli.ExitUsage || !strings.Contains(string(out), tc.want) {
				t.Fatalf("podagent %v with %s: %v\n%s", tc.args, tc.env, err, out)
			}
		})
	}
}
