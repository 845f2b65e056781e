// Package config declares every API server setting once: its flag, its SVC_
// environment variable, its default, and whether it is a secret (secrets
// also accept <VAR>_FILE, for Kubernetes-mounted files). docs/design.md §5 lists
// the names.
package config

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Config is the API server's settings.
type Config struct {
	HTTPAddr          string
	DataDir           string
	DatabaseURL       string
	Storage           string
	S3Endpoint        string
	S3Bucket          string
	S3AccessKey       string
	S3SecretKey       string
	S3UseSSL          bool
	RuntimeAuthSecret string
	RuntimeDriver     string
	ModelsFile        string
	PlansFile         string
	UpstreamBaseURL   string
	UpstreamAPIKey    string
	UpstreamTimeout   time.Duration
	MaxBodyBytes      int64
	LogLevel          string
	PublicURL         string
	AdvertiseURL      string
	PodagentBin       string
	CallbackAllowed   string
	PprofAddr         string
	HydrateDiskBudget int64
	// Runtime drivers and the agent-proxy.
	RuntimeStartTimeout time.Duration
	RuntimeStopGrace    time.Duration
	AgentProxyTimeout   time.Duration
	// Kubernetes runtime driver (issue 10).
	Kubeconfig         string
	RuntimeNamespace   string
	RuntimePodTemplate string
	RuntimeIdleTimeout time.Duration
	RuntimePodAPIURL   string
	// WebhookAnswerDeadline: accepted async messages not answered by then
	// show up in the outbox as unanswered.
	WebhookAnswerDeadline time.Duration
	// Metal runtime driver: the metal host's API.
	MetalHostURL   string
	MetalHostToken string
	// Fallbacks, retries, circuit breakers, key pools and tracing.
	UpstreamMaxAttempts     int
	UpstreamBreakerFailures int
	UpstreamCooldown        time.Duration
	UpstreamKeyCooldown     time.Duration
	UpstreamBackoffBase     time.Duration
	UpstreamBackoffMax      time.Duration
	OTLPEndpoint            string
}

func dur(p func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) (err error) { *p(c), err = time.ParseDuration(v); return }
}

func posInt(p func(*Config) *int) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err == nil && n < 1 {
			err = errors.New("must be at least 1")
		}
		*p(c) = n
		return err
	}
}

type option struct {
	flag, env, def, usage string
	secret                bool
	set                   func(c *Config, v string) error
}

func str(p func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error { *p(c) = v; return nil }
}

var options = []option{
	{flag: "http-addr", env: "SVC_HTTP_ADDR", def: "127.0.0.1:8080", usage: "listen address", set: str(func(c *Config) *string { return &c.HTTPAddr })},
	{flag: "data-dir", env: "SVC_DATA_DIR", def: "./.data", usage: "data directory (SQLite, fs object store, hydrated repos)", set: str(func(c *Config) *string { return &c.DataDir })},
	{flag: "database-url", env: "SVC_DATABASE_URL", usage: "postgres:// URL or SQLite path; empty: SQLite under the data dir", secret: true, set: str(func(c *Config) *string { return &c.DatabaseURL })},
	{flag: "storage", env: "SVC_STORAGE", def: "fs", usage: "object store backend: fs or s3", set: str(func(c *Config) *string { return &c.Storage })},
	{flag: "s3-endpoint", env: "SVC_S3_ENDPOINT", usage: "S3 endpoint host:port", set: str(func(c *Config) *string { return &c.S3Endpoint })},
	{flag: "s3-bucket", env: "SVC_S3_BUCKET", def: "svc", usage: "S3 bucket", set: str(func(c *Config) *string { return &c.S3Bucket })},
	{flag: "s3-access-key", env: "SVC_S3_ACCESS_KEY", usage: "S3 access key", secret: true, set: str(func(c *Config) *string { return &c.S3AccessKey })},
	{flag: "s3-secret-key", env: "SVC_S3_SECRET_KEY", usage: "S3 secret key", secret: true, set: str(func(c *Config) *string { return &c.S3SecretKey })},
	{flag: "s3-use-ssl", env: "SVC_S3_USE_SSL", def: "false", usage: "use TLS to reach S3", set: func(c *Config, v string) (err error) { c.S3UseSSL, err = strconv.ParseBool(v); return }},
	{flag: "runtime-auth-secret", env: "SVC_RUNTIME_AUTH_SECRET", usage: "secret runtime tokens are derived from", secret: true, set: str(func(c *Config) *string { return &c.RuntimeAuthSecret })},
	{flag: "runtime-driver", env: "SVC_RUNTIME_DRIVER", def: "local", usage: "runtime driver: local, kubernetes or metal", set: str(func(c *Config) *string { return &c.RuntimeDriver })},
	{flag: "models-file", env: "SVC_MODELS_FILE", usage: "models YAML; empty: built-in", set: str(func(c *Config) *string { return &c.ModelsFile })},
	{flag: "plans-file", env: "SVC_PLANS_FILE", usage: "plans YAML; empty: built-in", set: str(func(c *Config) *string { return &c.PlansFile })},
	{flag: "upstream-base-url", env: "SVC_UPSTREAM_BASE_URL", usage: "OpenAI-compatible base URL replacing the default provider", set: str(func(c *Config) *string { return &c.UpstreamBaseURL })},
	{flag: "upstream-api-key", env: "SVC_UPSTREAM_API_KEY", usage: "API key of the default provider", secret: true, set: str(func(c *Config) *string { return &c.UpstreamAPIKey })},
	{flag: "upstream-timeout", env: "SVC_UPSTREAM_TIMEOUT", def: "120s", usage: "wait for upstream response headers", set: func(c *Config, v string) (err error) { c.UpstreamTimeout, err = time.ParseDuration(v); return }},
	{flag: "max-body-bytes", env: "SVC_MAX_BODY_BYTES", def: "4194304", usage: "request body limit of the public API", set: func(c *Config, v string) (err error) { c.MaxBodyBytes, err = strconv.ParseInt(v, 10, 64); return }},
	{flag: "log-level", env: "SVC_LOG_LEVEL", def: "info", usage: "debug, info, warn, error", set: str(func(c *Config) *string { return &c.LogLevel })},
	{flag: "public-url", env: "SVC_PUBLIC_URL", usage: "externally reachable base URL (presigned fs URLs); default http://<http-addr>", set: str(func(c *Config) *string { return &c.PublicURL })},
	{flag: "advertise-url", env: "SVC_ADVERTISE_URL", usage: "this replica's base URL as the other replicas reach it (they relay a paired machine's requests to the replica holding its tunnel); default http://<listen addr>, a non-loopback address of this host when listening on all interfaces", set: str(func(c *Config) *string { return &c.AdvertiseURL })},
	{flag: "podagent-bin", env: "SVC_PODAGENT_BIN", def: "podagent", usage: "podagent binary for the local runtime driver", set: str(func(c *Config) *string { return &c.PodagentBin })},
	{flag: "pprof-addr", env: "SVC_PPROF_ADDR", usage: "serve net/http/pprof on this address (off when empty; keep it on loopback)", set: str(func(c *Config) *string { return &c.PprofAddr })},
	{flag: "hydrate-disk-budget", env: "SVC_HYDRATE_DISK_BUDGET", def: "10737418240", usage: "bytes of hydrated repository copies kept under <data-dir>/hydrated before least-recently-used ones are evicted (0: no bound)", set: func(c *Config, v string) (err error) { c.HydrateDiskBudget, err = strconv.ParseInt(v, 10, 64); return }},
	{flag: "callback-allowed-nets", env: "SVC_CALLBACK_ALLOWED_NETS", usage: "CIDRs callbacks may reach despite the SSRF guard", set: str(func(c *Config) *string { return &c.CallbackAllowed })},
	{flag: "runtime-start-timeout", env: "SVC_RUNTIME_START_TIMEOUT", def: "60s", usage: "a runtime cold start, from exec or pod creation to a ready /readyz (local and kubernetes drivers)", set: func(c *Config, v string) (err error) { c.RuntimeStartTimeout, err = time.ParseDuration(v); return }},
	{flag: "metal-host-url", env: "SVC_METAL_HOST_URL", usage: "metal driver: the metal host's API (podagent/cmd/metalhost)", set: str(func(c *Config) *string { return &c.MetalHostURL })},
	{flag: "metal-host-token", env: "SVC_METAL_HOST_TOKEN", usage: "metal driver: bearer token of the metal host's API", secret: true, set: str(func(c *Config) *string { return &c.MetalHostToken })},
	{flag: "runtime-stop-grace", env: "SVC_RUNTIME_STOP_GRACE", def: "25s", usage: "local driver: time between SIGTERM and SIGKILL of a pod", set: func(c *Config, v string) (err error) { c.RuntimeStopGrace, err = time.ParseDuration(v); return }},
	{flag: "upstream-max-attempts", env: "SVC_UPSTREAM_MAX_ATTEMPTS", def: "3", usage: "upstream requests per completion over all deployments and keys", set: posInt(func(c *Config) *int { return &c.UpstreamMaxAttempts })},
	{flag: "upstream-breaker-failures", env: "SVC_UPSTREAM_BREAKER_FAILURES", def: "5", usage: "consecutive failures (connect errors, timeouts, 5xx) that cool a deployment down", set: posInt(func(c *Config) *int { return &c.UpstreamBreakerFailures })},
	{flag: "upstream-cooldown", env: "SVC_UPSTREAM_COOLDOWN", def: "30s", usage: "how long a failing deployment is skipped before one probe", set: dur(func(c *Config) *time.Duration { return &c.UpstreamCooldown })},
	{flag: "upstream-key-cooldown", env: "SVC_UPSTREAM_KEY_COOLDOWN", def: "60s", usage: "how long an upstream key answering 401/403 (or 429 without Retry-After) is skipped", set: dur(func(c *Config) *time.Duration { return &c.UpstreamKeyCooldown })},
	{flag: "upstream-backoff-base", env: "SVC_UPSTREAM_BACKOFF_BASE", def: "100ms", usage: "first wait before a deployment is retried (doubles, with jitter)", set: dur(func(c *Config) *time.Duration { return &c.UpstreamBackoffBase })},
	{flag: "upstream-backoff-max", env: "SVC_UPSTREAM_BACKOFF_MAX", def: "2s", usage: "longest wait between attempts; a longer Retry-After ends the retries", set: dur(func(c *Config) *time.Duration { return &c.UpstreamBackoffMax })},
	{flag: "otel-exporter-otlp-endpoint", env: "SVC_OTEL_EXPORTER_OTLP_ENDPOINT", usage: "OTLP/HTTP base URL for traces (else OTEL_EXPORTER_OTLP_ENDPOINT); empty: tracing off", set: str(func(c *Config) *string { return &c.OTLPEndpoint })},
	{flag: "webhook-answer-deadline", env: "SVC_WEBHOOK_ANSWER_DEADLINE", def: "30m", usage: "an accepted async webhook message neither answered nor delivered by then shows up in the outbox as unanswered", set: func(c *Config, v string) (err error) {
		c.WebhookAnswerDeadline, err = time.ParseDuration(v)
		if err == nil && c.WebhookAnswerDeadline <= 0 {
			err = errors.New("must be positive")
		}
		return
	}},
	{flag: "kubeconfig", env: "SVC_KUBECONFIG", usage: "kubernetes driver: kubeconfig file (else $KUBECONFIG, else the in-cluster config)", set: str(func(c *Config) *string { return &c.Kubeconfig })},
	{flag: "runtime-namespace", env: "SVC_RUNTIME_NAMESPACE", usage: "kubernetes driver: namespace of runtime pods (default: the namespace of this pod)", set: str(func(c *Config) *string { return &c.RuntimeNamespace })},
	{flag: "runtime-pod-template-file", env: "SVC_RUNTIME_POD_TEMPLATE_FILE", usage: "kubernetes driver: the runtime pod template (the chart's ConfigMap)", set: str(func(c *Config) *string { return &c.RuntimePodTemplate })},
	{flag: "runtime-idle-timeout", env: "SVC_RUNTIME_IDLE_TIMEOUT", def: "30m", usage: "kubernetes driver: stop a runtime pod no request used for this long (0: never)", set: func(c *Config, v string) (err error) { c.RuntimeIdleTimeout, err = time.ParseDuration(v); return }},
	{flag: "runtime-pod-api-url", env: "SVC_RUNTIME_POD_API_URL", usage: "kubernetes driver: SVC_API_URL of runtime pods, replacing the template's (an API server outside the cluster)", set: str(func(c *Config) *string { return &c.RuntimePodAPIURL })},
	{flag: "agent-proxy-timeout", env: "SVC_AGENT_PROXY_TIMEOUT", def: "150s", usage: "agent-proxy: one exchange with the agent (above the 120 s sync reply timeout)", set: func(c *Config, v string) (err error) { c.AgentProxyTimeout, err = time.ParseDuration(v); return }},
}

// Parse reads flags from args, then fills everything not given on the
// command line from the environment (or <VAR>_FILE for secrets), then defaults.
func Parse(name string, args []string) (*Config, *flag.FlagSet, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	vals := make([]*string, len(options))
	for i, o := range options {
		vals[i] = fs.String(o.flag, "", fmt.Sprintf("%s (env %s, default %q)", o.usage, o.env, o.def))
	}
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	c := &Config{}
	for i, o := range options {
		v, err := o.value(given[o.flag], *vals[i])
		if err != nil {
			return nil, nil, err
		}
		if err := o.set(c, v); err != nil {
			return nil, nil, fmt.Errorf("config: %s: %w", o.env, err)
		}
	}
	if c.Storage != "fs" && c.Storage != "s3" {
		return nil, nil, errors.New("config: SVC_STORAGE must be fs or s3")
	}
	return c, fs, nil
}

func (o option) value(flagGiven bool, flagVal string) (string, error) {
	if flagGiven {
		return flagVal, nil
	}
	if v, ok := os.LookupEnv(o.env); ok && v != "" {
		return v, nil
	}
	if o.secret {
		if path := os.Getenv(o.env + "_FILE"); path != "" {
			b, err := os.ReadFile(path)
			if err != nil {
				return "", fmt.Errorf("config: %s_FILE: %w", o.env, err)
			}
			return strings.TrimSpace(string(b)), nil
		}
	}
	return o.def, nil
}
