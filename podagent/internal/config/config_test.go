package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/syncmode"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte("svc_rt_p1.sig\n"), 0o600)
	env := map[string]string{
		"SVC_PROJECT_ID": "p1", "SVC_RUNTIME_TOKEN_FILE": tokenFile, "SVC_STORAGE": "s3",
		"SVC_S3_ENDPOINT": "minio:9000", "LARGE_FILE_BYTES": "1024", "SVC_DEGRADE_AFTER_FAILURES": "5",
	}
	c, err := Parse("t", []string{"-http-addr", ":9999"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if c.ProjectID != "p1" || c.RuntimeToken != "svc_rt_p1.sig" || c.Store.Backend != "s3" || c.Store.Bucket != "svc" ||
		c.LargeFileBytes != 1024 || c.DegradeAfterFailures != 5 || c.HTTPAddr != ":9999" || c.Mode != syncmode.GitOnly {
		t.Fatalf("config = %+v", c)
	}
	// Flags win over env.
	c, err = Parse("t", []string{"-degrade-after-failures", "2"}, func(k string) string { return env[k] })
	if err != nil || c.DegradeAfterFailures != 2 {
		t.Fatalf("%v %v", c, err)
	}
}

func TestParseRejects(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"SVC_RUNTIME_TOKEN": "x"}, "SVC_PROJECT_ID is required"},
		{map[string]string{"SVC_PROJECT_ID": "p"}, "SVC_RUNTIME_TOKEN"},
		{map[string]string{"SVC_PROJECT_ID": "../x", "SVC_RUNTIME_TOKEN": "x"}, "not a valid project id"},
		{map[string]string{"SVC_PROJECT_ID": "p", "SVC_RUNTIME_TOKEN": "x", "SVC_CLOUD_SYNC_MODE": "nope"}, "unknown cloud sync mode"},
		{map[string]string{"SVC_PROJECT_ID": "p", "SVC_RUNTIME_TOKEN": "x", "SVC_STORAGE": "s3"}, "SVC_S3_ENDPOINT"},
		{map[string]string{"SVC_PROJECT_ID": "p", "SVC_RUNTIME_TOKEN": "x", "SVC_DEGRADE_AFTER_FAILURES": "0"}, "SVC_DEGRADE_AFTER_FAILURES"},
	} {
		_, err := Parse("t", nil, func(k string) string { return tt.env[k] })
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: err = %v, want %q", tt.env, err, tt.want)
		}
	}
}

// Webhook channel settings have flags too; a flag wins over the environment.
func TestChannelSettings(t *testing.T) {
	t.Parallel()
	env := map[string]string{"SVC_PROJECT_ID": "prj_a", "SVC_RUNTIME_TOKEN": "t",
		"SVC_WEBHOOK_SYNC_TIMEOUT": "9s", "SVC_CALLBACK_ALLOWED_NETS": "127.0.0.0/8"}
	c, err := Parse("podagent serve", []string{"--webhook-sync-timeout", "5s"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Webhook.SyncTimeout; got != 5*time.Second {
		t.Errorf("flag: %v", got)
	}
	if got := c.Webhook.AllowedNets; len(got) != 1 || got[0].String() != "127.0.0.0/8" {
		t.Errorf("env: %v", got)
	}
	// Unset: the webhook package's default.
	if got := c.Webhook.AgentModel; got != "svc-2-0" {
		t.Errorf("unset: %q", got)
	}
}
