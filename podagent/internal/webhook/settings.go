package webhook

import (
	"net/netip"
	"strconv"
	"time"

	"github.com/svc-dev/svc/podagent/internal/callback"
	"github.com/svc-dev/svc/shared/settings"
)

// Settings are the webhook channel's tunables (all optional), declared in
// the pod's option table by SettingsOptions: each has a flag and an env var.
type Settings struct {
	SyncTimeout      time.Duration
	MaxBodyBytes     int64
	TurnTimeout      time.Duration
	ChannelConfigTTL time.Duration
	AllowedNets      []netip.Prefix
	CallbackAttempts int
	CallbackBase     time.Duration
	CallbackMax      time.Duration
	CallbackTimeout  time.Duration
	// CallbackForwardURL is the host's callback forwarder (micro-VM guest
	// mode sets it: callbacks leave through the host).
	CallbackForwardURL string
	AgentModel         string
	MaxIterations      int
}

// Defaults.
const (
	DefaultSyncTimeout  = 120 * time.Second
	DefaultMaxBodyBytes = 1 << 20
	DefaultTurnTimeout  = 15 * time.Minute
)

// SettingsOptions declares the webhook channel's settings for a config C
// holding them at p.
func SettingsOptions[C any](p func(*C) *Settings) []settings.Option[C] {
	dur := func(f func(*Settings) *time.Duration) func(*C, string) error {
		return settings.PositiveDuration(func(c *C) *time.Duration { return f(p(c)) })
	}
	return []settings.Option[C]{
		{Flag: "webhook-sync-timeout", Env: "SVC_WEBHOOK_SYNC_TIMEOUT", Def: DefaultSyncTimeout.String(), Usage: "sync reply timeout", Set: dur(func(s *Settings) *time.Duration { return &s.SyncTimeout })},
		{Flag: "webhook-max-body-bytes", Env: "SVC_WEBHOOK_MAX_BODY_BYTES", Def: strconv.Itoa(DefaultMaxBodyBytes), Usage: "webhook request body limit (413 above)", Set: settings.PositiveInt(func(c *C) *int64 { return &p(c).MaxBodyBytes })},
		{Flag: "webhook-turn-timeout", Env: "SVC_WEBHOOK_TURN_TIMEOUT", Def: DefaultTurnTimeout.String(), Usage: "bound of one agent turn", Set: dur(func(s *Settings) *time.Duration { return &s.TurnTimeout })},
		{Flag: "channel-config-ttl", Env: "SVC_CHANNEL_CONFIG_TTL", Def: "1s", Usage: "cache of the channel config", Set: dur(func(s *Settings) *time.Duration { return &s.ChannelConfigTTL })},
		{Flag: "callback-allowed-nets", Env: "SVC_CALLBACK_ALLOWED_NETS", Usage: "CIDRs callbacks may reach despite the SSRF guard", Set: func(c *C, v string) (err error) {
			p(c).AllowedNets, err = callback.ParseAllowedNets(v)
			return
		}},
		{Flag: "callback-max-attempts", Env: "SVC_CALLBACK_MAX_ATTEMPTS", Def: strconv.Itoa(callback.DefaultAttempts), Usage: "tries per callback", Set: settings.PositiveInt(func(c *C) *int { return &p(c).CallbackAttempts })},
		{Flag: "callback-retry-base", Env: "SVC_CALLBACK_RETRY_BASE", Def: callback.DefaultRetryBase.String(), Usage: "first callback backoff (doubling, ±20 % jitter)", Set: dur(func(s *Settings) *time.Duration { return &s.CallbackBase })},
		{Flag: "callback-retry-max", Env: "SVC_CALLBACK_RETRY_MAX", Def: callback.DefaultRetryMax.String(), Usage: "callback backoff cap", Set: dur(func(s *Settings) *time.Duration { return &s.CallbackMax })},
		{Flag: "callback-timeout", Env: "SVC_CALLBACK_TIMEOUT", Def: callback.DefaultAttemptTimeout.String(), Usage: "one callback POST", Set: dur(func(s *Settings) *time.Duration { return &s.CallbackTimeout })},
		{Flag: "callback-forward-url", Env: "SVC_CALLBACK_FORWARD_URL", Usage: "send callbacks through this host forwarder (micro-VM guests; set by guest mode)", Set: settings.String(func(c *C) *string { return &p(c).CallbackForwardURL })},
		{Flag: "agent-model", Env: "SVC_AGENT_MODEL", Def: "svc-2-0", Usage: "model id of the tool loop", Set: settings.String(func(c *C) *string { return &p(c).AgentModel })},
		{Flag: "agent-max-iterations", Env: "SVC_AGENT_MAX_ITERATIONS", Def: "20", Usage: "model calls per turn", Set: settings.PositiveInt(func(c *C) *int { return &p(c).MaxIterations })},
	}
}

// SettingsFromEnv reads Settings alone (flags of the pod's table aside);
// getenv nil means no environment.
func SettingsFromEnv(getenv func(string) string) (Settings, error) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	var s Settings
	_, err := settings.Parse(&s, "webhook", nil, getenv, SettingsOptions(func(s *Settings) *Settings { return s }))
	return s, err
}
