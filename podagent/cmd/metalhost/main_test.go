package main

import (
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/testenv/tabletest"
)

func TestParse(t *testing.T) {
	t.Parallel()
	base := map[string]string{"SVC_METAL_HOST_TOKEN": "tok", "SVC_API_URL": "http://127.0.0.1:1"}
	cases := []struct {
		name    string
		env     map[string]string
		args    []string
		wantErr string
		check   func(*config) bool
	}{
		{name: "defaults", check: func(c *config) bool {
			return c.ExportInterval == 2*time.Minute && c.Accel == "tcg" && c.Snapshots && c.MemoryMB == 256 &&
				strings.HasSuffix(c.CacheDir, "images") && strings.HasSuffix(c.GuestAgent, "podagent-guest")
		}},
		{name: "interval from the spec's variable", env: map[string]string{"METAL_PROJECT_DATA_EXPORT_INTERVAL_MS": "1500"},
			check: func(c *config) bool { return c.ExportInterval == 1500*time.Millisecond }},
		{name: "flag wins", env: map[string]string{"SVC_METAL_ACCEL": "tcg"}, args: []string{"-accel", "kvm"},
			check: func(c *config) bool { return c.Accel == "kvm" }},
		{name: "bad interval", env: map[string]string{"METAL_PROJECT_DATA_EXPORT_INTERVAL_MS": "0"}, wantErr: "METAL_PROJECT_DATA_EXPORT_INTERVAL_MS"},
		{name: "bad accel", env: map[string]string{"SVC_METAL_ACCEL": "hvf"}, wantErr: "SVC_METAL_ACCEL"},
		{name: "no token", env: map[string]string{"SVC_METAL_HOST_TOKEN": ""}, wantErr: "SVC_METAL_HOST_TOKEN is required"},
		{name: "no api", env: map[string]string{"SVC_API_URL": ""}, wantErr: "SVC_API_URL is required"},
		{name: "s3 without endpoint", env: map[string]string{"SVC_STORAGE": "s3"}, wantErr: "SVC_S3_ENDPOINT"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{}
			for k, v := range base {
				env[k] = v
			}
			for k, v := range c.env {
				env[k] = v
			}
			cfg, err := parse(c.args, func(k string) string { return env[k] })
			tabletest.Check(t, cfg, err, c.wantErr, c.check)
		})
	}
}

// A mistyped SVC_ variable refuses the start with the setting meant; an
// SVC_GUEST_ variable (passed to the guests) does not. Not parallel: the
// check reads the process environment.
func TestUnknownVariableRefusesStart(t *testing.T) {
	env := func(k string) string {
		return map[string]string{"SVC_METAL_HOST_TOKEN": "tok", "SVC_API_URL": "http://127.0.0.1:1"}[k]
	}
	t.Setenv("SVC_GUEST_LOG_LEVEL", "debug")
	if _, err := parse(nil, env); err != nil {
		t.Fatalf("refused SVC_GUEST_LOG_LEVEL: %v", err)
	}
	t.Setenv("SVC_METAL_ACEL", "kvm")
	if _, err := parse(nil, env); err == nil || !strings.Contains(err.Error(), "SVC_METAL_ACEL (did you mean SVC_METAL_ACCEL?)") {
		t.Fatalf("parse = %v, want the unknown SVC_METAL_ACEL refused", err)
	}
}
