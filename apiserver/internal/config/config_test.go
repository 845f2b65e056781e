package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/config"
)

// A mistyped SVC_ variable refuses the start and names the setting meant;
// afterwards nothing was configured from the environment. Not parallel:
// the check reads the process environment (t.Setenv).
func TestUnknownVariableRefusesStart(t *testing.T) {
	for _, tc := range []struct {
		name, env, want string
	}{
		{name: "typo", env: "SVC_HTTP_ADR", want: "SVC_HTTP_ADR (did you mean SVC_HTTP_ADDR?)"},
		{name: "secret file typo", env: "SVC_DATABASE_URL_FLE", want: "did you mean SVC_DATABASE_URL_FILE?"},
		{name: "a typo of a pod's setting", env: "SVC_WORKSPACE_DRI", want: "SVC_WORKSPACE_DRI (did you mean SVC_WORKSPACE_DIR?)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tc.env, "x")
			c, _, err := config.Parse("apiserver serve", nil)
			if err == nil || c != nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse = %v, %v; want an error with %q", c, err, tc.want)
			}
		})
	}
}

// Settings, the reserved prefixes (SVC_POD_ for pods, SVC_TEST_ for the
// harness) and other programs' variables (a pod's in an environment shared
// by both binaries, the test harness's) start the server; the latter are
// kept for the debug log.
func TestKnownVariablesStart(t *testing.T) {
	for _, kv := range [][2]string{{"SVC_HTTP_ADDR", "127.0.0.1:0"}, {"SVC_POD_WEBHOOK_SYNC_TIMEOUT", "1s"},
		{"SVC_TEST_DATABASE_URL", "postgres://x"}, {"SVC_BIN_DIR", "/bin"}, {"SVC_RUNTIME_AUTH_SECRET_FILE", ""},
		{"SVC_WORKSPACE_DIR", "/w"}} {
		t.Setenv(kv[0], kv[1])
	}
	c, _, err := config.Parse("apiserver serve", nil)
	if err != nil || c.HTTPAddr != "127.0.0.1:0" {
		t.Fatalf("Parse = %+v, %v", c, err)
	}
	foreign := map[string]string{}
	for _, f := range c.Foreign {
		foreign[f.Name] = f.Program
	}
	// The test's own environment may hold more of the harness's variables.
	if foreign["SVC_BIN_DIR"] != "the test harness" || foreign["SVC_WORKSPACE_DIR"] != "podagent" || foreign["SVC_HTTP_ADDR"] != "" {
		t.Fatalf("other programs' variables %v", foreign)
	}
}

// The large-file retention job is off unless an operator sets its interval
// (spec 10.3: objects are never auto-pruned; docs/sync-modes.md §4).
func TestLFSGCIsOffByDefault(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		want time.Duration
	}{
		{"default", nil, 0},
		{"enabled by the setting", []string{"-lfs-gc-interval", "24h"}, 24 * time.Hour},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, _, err := config.Parse("apiserver", tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if c.LFSGCInterval != tc.want {
				t.Fatalf("LFSGCInterval = %v, want %v", c.LFSGCInterval, tc.want)
			}
		})
	}
}

// Key budgets are admitted from leases unless turned off; any other value
// refuses the start.
func TestKeyBudgetLeasesSetting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		args    []string
		want    string
		wantErr bool
	}{
		{"default", nil, "on", false},
		{"off", []string{"-key-budget-leases", "off"}, "off", false},
		{"unknown value", []string{"-key-budget-leases", "maybe"}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, err := config.Parse("apiserver", tc.args)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("-key-budget-leases %v accepted", tc.args)
				}
				return
			}
			if err != nil || c.KeyBudgetLeases != tc.want {
				t.Fatalf("KeyBudgetLeases = %q (%v), want %q", c.KeyBudgetLeases, err, tc.want)
			}
		})
	}
}
