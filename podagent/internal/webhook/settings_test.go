package webhook_test

import (
	"testing"
	"time"

	"github.com/svc-dev/svc/podagent/internal/webhook"
)

func TestSettingsFromEnv(t *testing.T) {
	t.Parallel()
	s, err := webhook.SettingsFromEnv(nil)
	if err != nil || s.SyncTimeout != 120*time.Second || s.MaxBodyBytes != 1<<20 || len(s.AllowedNets) != 0 || s.AgentModel != "svc-2-0" {
		t.Fatalf("defaults %+v %v", s, err)
	}
	env := map[string]string{"SVC_WEBHOOK_SYNC_TIMEOUT": "250ms", "SVC_WEBHOOK_MAX_BODY_BYTES": "2048",
		"SVC_CALLBACK_ALLOWED_NETS": "127.0.0.0/8", "SVC_CALLBACK_MAX_ATTEMPTS": "4", "SVC_AGENT_MODEL": "svc-1-0"}
	s, err = webhook.SettingsFromEnv(func(k string) string { return env[k] })
	if err != nil || s.SyncTimeout != 250*time.Millisecond || s.MaxBodyBytes != 2048 || len(s.AllowedNets) != 1 ||
		s.CallbackAttempts != 4 || s.AgentModel != "svc-1-0" {
		t.Fatalf("%+v %v", s, err)
	}
	bad := map[string]string{"SVC_WEBHOOK_SYNC_TIMEOUT": "soon", "SVC_CALLBACK_ALLOWED_NETS": "nope", "SVC_CALLBACK_MAX_ATTEMPTS": "-1"}
	if _, err := webhook.SettingsFromEnv(func(k string) string { return bad[k] }); err == nil {
		t.Fatal("bad settings accepted")
	}
}
