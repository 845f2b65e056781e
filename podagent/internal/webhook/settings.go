package webhook

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/svc-dev/svc/podagent/internal/callback"
)

// Settings are the webhook channel's tunables, read from the environment
// (all optional).
//
//	SVC_WEBHOOK_SYNC_TIMEOUT       sync reply timeout (default 120s, spec 8)
//	SVC_WEBHOOK_MAX_BODY_BYTES     request body limit (default 1048576) → 413
//	SVC_WEBHOOK_TURN_TIMEOUT       bound of one agent turn (default 15m)
//	SVC_CHANNEL_CONFIG_TTL         cache of the channel config (default 1s)
//	SVC_CALLBACK_ALLOWED_NETS      CIDRs callbacks may reach despite the SSRF guard
//	SVC_CALLBACK_MAX_ATTEMPTS      tries per callback (default 8)
//	SVC_CALLBACK_RETRY_BASE        first backoff (default 1s, doubling, ±20 % jitter)
//	SVC_CALLBACK_RETRY_MAX         backoff cap (default 2m)
//	SVC_CALLBACK_TIMEOUT           one callback POST (default 30s)
//	SVC_CALLBACK_FORWARD_URL       send callbacks through a host's forwarder (micro-VM guests; set by guest mode)
//	SVC_AGENT_MODEL                model id for the tool loop (default svc-2-0)
//	SVC_AGENT_MAX_ITERATIONS       model calls per turn (default 20)
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
	// CallbackForwardURL is the host's callback forwarder (guest mode).
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

// SettingsFromEnv reads Settings; getenv nil means no environment.
func SettingsFromEnv(getenv func(string) string) (Settings, error) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	s := Settings{
		SyncTimeout: DefaultSyncTimeout, MaxBodyBytes: DefaultMaxBodyBytes, TurnTimeout: DefaultTurnTimeout,
		ChannelConfigTTL: time.Second, CallbackAttempts: callback.DefaultAttempts, CallbackBase: callback.DefaultRetryBase,
		CallbackMax: callback.DefaultRetryMax, CallbackTimeout: callback.DefaultAttemptTimeout, AgentModel: "svc-2-0",
		MaxIterations: 20,
	}
	var errs []error
	dur := func(env string, p *time.Duration) {
		if v := getenv(env); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				errs = append(errs, fmt.Errorf("%s: %q is not a positive duration", env, v))
				return
			}
			*p = d
		}
	}
	num := func(env string, set func(int64)) {
		if v := getenv(env); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				errs = append(errs, fmt.Errorf("%s: %q is not a positive integer", env, v))
				return
			}
			set(n)
		}
	}
	dur("SVC_WEBHOOK_SYNC_TIMEOUT", &s.SyncTimeout)
	dur("SVC_WEBHOOK_TURN_TIMEOUT", &s.TurnTimeout)
	dur("SVC_CHANNEL_CONFIG_TTL", &s.ChannelConfigTTL)
	dur("SVC_CALLBACK_RETRY_BASE", &s.CallbackBase)
	dur("SVC_CALLBACK_RETRY_MAX", &s.CallbackMax)
	dur("SVC_CALLBACK_TIMEOUT", &s.CallbackTimeout)
	num("SVC_WEBHOOK_MAX_BODY_BYTES", func(n int64) { s.MaxBodyBytes = n })
	num("SVC_CALLBACK_MAX_ATTEMPTS", func(n int64) { s.CallbackAttempts = int(n) })
	num("SVC_AGENT_MAX_ITERATIONS", func(n int64) { s.MaxIterations = int(n) })
	s.CallbackForwardURL = getenv("SVC_CALLBACK_FORWARD_URL")
	if v := getenv("SVC_AGENT_MODEL"); v != "" {
		s.AgentModel = v
	}
	nets, err := callback.ParseAllowedNets(getenv("SVC_CALLBACK_ALLOWED_NETS"))
	if err != nil {
		errs = append(errs, err)
	}
	s.AllowedNets = nets
	return s, errors.Join(errs...)
}
