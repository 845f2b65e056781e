// Package config declares every API server setting once: its flag, its SVC_
// environment variable, its default, and whether it is a secret (secrets
// also accept <VAR>_FILE, for Kubernetes-mounted files). docs/design.md §5 lists
// the names.
package config

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/webhookqueue"

	"github.com/svc-dev/svc/shared/logging"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/settings"
)

// Config is the API server's settings.
type Config struct {
	// Foreign are the variables of the environment that belong to another
	// program of the service (the pod agent's, say), accepted and ignored;
	// logged at debug once the logger exists.
	Foreign []settings.Foreign

	HTTPAddr string
	// DBOutageMode (serve, fail-closed) and DBOutageServeFor: what the
	// gateway does while PostgreSQL is down (docs/gateway.md).
	DBOutageMode     string
	DBOutageServeFor time.Duration
	// KeyBudgetLeases (on, off): key budgets are admitted from per-replica
	// leases, or reserved per request in the database (docs/gateway.md).
	KeyBudgetLeases string
	// UsageRetention: usage_records partitions older than this are dropped
	// (PostgreSQL; 0 keeps them); the daily aggregates stay.
	UsageRetention time.Duration
	// The HTTP server's timeouts (server.Timeouts).
	HTTPReadHeaderTimeout time.Duration
	HTTPIdleTimeout       time.Duration
	HTTPWriteTimeout      time.Duration
	DataDir               string
	DatabaseURL           string
	// DatabaseMaxConns bounds the PostgreSQL connections of this replica.
	DatabaseMaxConns int
	// Store is SVC_STORAGE and SVC_S3_* (its fs Dir is set at open).
	Store             objstore.Config
	RuntimeAuthSecret string
	RuntimeDriver     string
	ModelsFile        string
	PlansFile         string
	UpstreamBaseURL   string
	UpstreamAPIKey    string
	UpstreamTimeout   time.Duration
	MaxBodyBytes      int64
	Log               logging.Options
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
	WebhookMaxBody      int64
	// Kubernetes runtime driver.
	Kubeconfig         string
	RuntimeNamespace   string
	RuntimePodTemplate string
	RuntimeIdleTimeout time.Duration
	RuntimePodAPIURL   string
	// Client-side rate limits of the kubernetes driver (docs/scale.md): the
	// Kubernetes client's requests, and pod creations with their queue.
	KubeClientQPS   int
	KubeClientBurst int
	PodCreateQPS    int
	PodCreateBurst  int
	PodCreateQueue  int
	// WarmPoolSize is how many spare runtime pods the kubernetes driver
	// keeps for first messages (docs/scale.md).
	WarmPoolSize int
	// WebhookAnswerDeadline: accepted async messages not answered by then
	// show up in the outbox as unanswered.
	WebhookAnswerDeadline time.Duration
	// WebhookAttemptRetention bounds the callback attempt log.
	WebhookAttemptRetention time.Duration
	// WebhookFailingAfter: a callback endpoint every attempt to which
	// failed for this long is marked failing (Svix: 5 days).
	WebhookFailingAfter time.Duration
	// The API's callback delivery queue (docs/webhook-delivery.md): the
	// delays of its attempts, how many it makes at once per replica, and
	// the per-endpoint throttle (in flight, attempts per second).
	WebhookRetrySchedule     string
	WebhookQueueConcurrency  int
	WebhookEndpointMaxFlight int
	WebhookEndpointRate      int
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
	// The idle upstream connection pool.
	UpstreamMaxIdlePerHost int
	UpstreamIdleTimeout    time.Duration
	OTLPEndpoint           string
	// LFSGCInterval runs the large-file retention job (internal/lfsgc) on
	// every replica at this interval; 0 (the default) leaves it off, as
	// spec 10.3 says objects are never auto-pruned.
	LFSGCInterval time.Duration
}

var options = slices.Concat([]settings.Option[Config]{
	{Flag: "http-addr", Env: "SVC_HTTP_ADDR", Def: "127.0.0.1:8080", Usage: "listen address", Set: settings.String(func(c *Config) *string { return &c.HTTPAddr })},
	{Flag: "http-read-header-timeout", Env: "SVC_HTTP_READ_HEADER_TIMEOUT", Def: "10s", Usage: "a client must send a request's headers within this long", Set: settings.PositiveDuration(func(c *Config) *time.Duration { return &c.HTTPReadHeaderTimeout })},
	{Flag: "http-idle-timeout", Env: "SVC_HTTP_IDLE_TIMEOUT", Def: "120s", Usage: "a kept-alive client connection with no request for this long is closed (keep it above a load balancer's idle timeout)", Set: settings.PositiveDuration(func(c *Config) *time.Duration { return &c.HTTPIdleTimeout })},
	{Flag: "http-write-timeout", Env: "SVC_HTTP_WRITE_TIMEOUT", Def: "60s", Usage: "writing a non-streamed answer (public API, probes, console) from its headers on; streams, git and large files have none", Set: settings.PositiveDuration(func(c *Config) *time.Duration { return &c.HTTPWriteTimeout })},
	{Flag: "db-outage-mode", Env: "SVC_DB_OUTAGE_MODE", Def: "serve", Usage: "while the database is down: serve (known keys, plans, windows and budgets go on for the serve-for time, usage is spooled) or fail-closed (503)", Set: settings.String(func(c *Config) *string { return &c.DBOutageMode })},
	{Flag: "key-budget-leases", Env: "SVC_KEY_BUDGET_LEASES", Def: "on", Usage: "on: each replica leases blocks of a key's budget and admits its requests from them; off: every request of a budgeted key reserves in the database", Set: settings.String(func(c *Config) *string { return &c.KeyBudgetLeases })},
	{Flag: "db-outage-serve-for", Env: "SVC_DB_OUTAGE_SERVE_FOR", Def: "10m", Usage: "serve mode: how long after this replica last read a key, a workspace's windows or a key budget it keeps serving them while the database is down", Set: settings.PositiveDuration(func(c *Config) *time.Duration { return &c.DBOutageServeFor })},
	{Flag: "usage-retention", Env: "SVC_USAGE_RETENTION", Def: "0", Usage: "PostgreSQL: drop usage record partitions (days) older than this, e.g. 2160h for 90 days; 0 keeps every record (the daily aggregates the console reads are always kept)", Set: settings.Duration(func(c *Config) *time.Duration { return &c.UsageRetention })},
	{Flag: "data-dir", Env: "SVC_DATA_DIR", Def: "./.data", Usage: "data directory (SQLite, fs object store, hydrated repos)", Set: settings.String(func(c *Config) *string { return &c.DataDir })},
	{Flag: "database-url", Env: "SVC_DATABASE_URL", Usage: "postgres:// URL or SQLite path; empty: SQLite under the data dir", Secret: true, Set: settings.String(func(c *Config) *string { return &c.DatabaseURL })},
	{Flag: "database-max-conns", Env: "SVC_DATABASE_MAX_CONNS", Def: "32", Usage: "PostgreSQL connections one replica opens at most (and keeps idle up to 5 minutes); replicas × this must stay under the server's max_connections", Set: settings.PositiveInt(func(c *Config) *int { return &c.DatabaseMaxConns })},
	{Flag: "runtime-auth-secret", Env: "SVC_RUNTIME_AUTH_SECRET", Usage: "secret runtime tokens are derived from", Secret: true, Set: settings.String(func(c *Config) *string { return &c.RuntimeAuthSecret })},
	{Flag: "runtime-driver", Env: "SVC_RUNTIME_DRIVER", Def: "local", Usage: "runtime driver: local, kubernetes or metal", Set: settings.String(func(c *Config) *string { return &c.RuntimeDriver })},
	{Flag: "models-file", Env: "SVC_MODELS_FILE", Usage: "models YAML; empty: built-in", Set: settings.String(func(c *Config) *string { return &c.ModelsFile })},
	{Flag: "plans-file", Env: "SVC_PLANS_FILE", Usage: "plans YAML; empty: built-in", Set: settings.String(func(c *Config) *string { return &c.PlansFile })},
	{Flag: "upstream-base-url", Env: "SVC_UPSTREAM_BASE_URL", Usage: "OpenAI-compatible base URL replacing the default provider", Set: settings.String(func(c *Config) *string { return &c.UpstreamBaseURL })},
	{Flag: "upstream-api-key", Env: "SVC_UPSTREAM_API_KEY", Usage: "API key of the default provider", Secret: true, Set: settings.String(func(c *Config) *string { return &c.UpstreamAPIKey })},
	{Flag: "upstream-timeout", Env: "SVC_UPSTREAM_TIMEOUT", Def: "120s", Usage: "wait for upstream response headers", Set: settings.Duration(func(c *Config) *time.Duration { return &c.UpstreamTimeout })},
	{Flag: "max-body-bytes", Env: "SVC_MAX_BODY_BYTES", Def: "4194304", Usage: "request body limit of the public API", Set: settings.Int(func(c *Config) *int64 { return &c.MaxBodyBytes })},
	{Flag: "public-url", Env: "SVC_PUBLIC_URL", Usage: "externally reachable base URL (presigned fs URLs); default http://<http-addr>", Set: settings.String(func(c *Config) *string { return &c.PublicURL })},
	{Flag: "advertise-url", Env: "SVC_ADVERTISE_URL", Usage: "this replica's base URL as the other replicas reach it (they relay a paired machine's requests to the replica holding its tunnel); default http://<listen addr>, a non-loopback address of this host when listening on all interfaces", Set: settings.String(func(c *Config) *string { return &c.AdvertiseURL })},
	{Flag: "podagent-bin", Env: "SVC_PODAGENT_BIN", Def: "podagent", Usage: "podagent binary for the local runtime driver", Set: settings.String(func(c *Config) *string { return &c.PodagentBin })},
	{Flag: "pprof-addr", Env: "SVC_PPROF_ADDR", Usage: "serve net/http/pprof on this address (off when empty; keep it on loopback)", Set: settings.String(func(c *Config) *string { return &c.PprofAddr })},
	{Flag: "hydrate-disk-budget", Env: "SVC_HYDRATE_DISK_BUDGET", Def: "10737418240", Usage: "bytes of hydrated repository copies kept under <data-dir>/hydrated before least-recently-used ones are evicted (0: no bound)", Set: settings.Int(func(c *Config) *int64 { return &c.HydrateDiskBudget })},
	{Flag: "callback-allowed-nets", Env: "SVC_CALLBACK_ALLOWED_NETS", Usage: "CIDRs callbacks may reach despite the SSRF guard", Set: settings.String(func(c *Config) *string { return &c.CallbackAllowed })},
	{Flag: "runtime-start-timeout", Env: "SVC_RUNTIME_START_TIMEOUT", Def: "60s", Usage: "a runtime cold start, from exec or pod creation to a ready /readyz (local and kubernetes drivers)", Set: settings.Duration(func(c *Config) *time.Duration { return &c.RuntimeStartTimeout })},
	{Flag: "metal-host-url", Env: "SVC_METAL_HOST_URL", Usage: "metal driver: the metal host's API (podagent/cmd/metalhost)", Set: settings.String(func(c *Config) *string { return &c.MetalHostURL })},
	{Flag: "metal-host-token", Env: "SVC_METAL_HOST_TOKEN", Usage: "metal driver: bearer token of the metal host's API", Secret: true, Set: settings.String(func(c *Config) *string { return &c.MetalHostToken })},
	{Flag: "runtime-stop-grace", Env: "SVC_RUNTIME_STOP_GRACE", Def: "30s", Usage: "local driver: time between SIGTERM and SIGKILL of a pod (the pod's shutdown needs 21 s after its drain)", Set: settings.Duration(func(c *Config) *time.Duration { return &c.RuntimeStopGrace })},
	{Flag: "upstream-max-attempts", Env: "SVC_UPSTREAM_MAX_ATTEMPTS", Def: "3", Usage: "upstream requests per completion over all deployments and keys", Set: settings.PositiveInt(func(c *Config) *int { return &c.UpstreamMaxAttempts })},
	{Flag: "upstream-breaker-failures", Env: "SVC_UPSTREAM_BREAKER_FAILURES", Def: "5", Usage: "consecutive failures (connect errors, timeouts, 5xx) that cool a deployment down", Set: settings.PositiveInt(func(c *Config) *int { return &c.UpstreamBreakerFailures })},
	{Flag: "upstream-cooldown", Env: "SVC_UPSTREAM_COOLDOWN", Def: "30s", Usage: "how long a failing deployment is skipped before one probe", Set: settings.Duration(func(c *Config) *time.Duration { return &c.UpstreamCooldown })},
	{Flag: "upstream-key-cooldown", Env: "SVC_UPSTREAM_KEY_COOLDOWN", Def: "60s", Usage: "how long an upstream key answering 401/403 (or 429 without Retry-After) is skipped", Set: settings.Duration(func(c *Config) *time.Duration { return &c.UpstreamKeyCooldown })},
	{Flag: "upstream-backoff-base", Env: "SVC_UPSTREAM_BACKOFF_BASE", Def: "100ms", Usage: "first wait before a deployment is retried (doubles, with jitter)", Set: settings.Duration(func(c *Config) *time.Duration { return &c.UpstreamBackoffBase })},
	{Flag: "upstream-backoff-max", Env: "SVC_UPSTREAM_BACKOFF_MAX", Def: "2s", Usage: "longest wait between attempts; a longer Retry-After ends the retries", Set: settings.Duration(func(c *Config) *time.Duration { return &c.UpstreamBackoffMax })},
	{Flag: "upstream-max-idle-conns-per-host", Env: "SVC_UPSTREAM_MAX_IDLE_CONNS_PER_HOST", Def: "64", Usage: "idle (kept-alive) connections kept per upstream host; more are closed when their request ends", Set: settings.PositiveInt(func(c *Config) *int { return &c.UpstreamMaxIdlePerHost })},
	{Flag: "upstream-idle-conn-timeout", Env: "SVC_UPSTREAM_IDLE_CONN_TIMEOUT", Def: "90s", Usage: "an idle upstream connection is closed after this long", Set: settings.PositiveDuration(func(c *Config) *time.Duration { return &c.UpstreamIdleTimeout })},
	{Flag: "otel-exporter-otlp-endpoint", Env: "SVC_OTEL_EXPORTER_OTLP_ENDPOINT", Usage: "OTLP/HTTP base URL for traces (else OTEL_EXPORTER_OTLP_ENDPOINT); empty: tracing off", Set: settings.String(func(c *Config) *string { return &c.OTLPEndpoint })},
	{Flag: "webhook-answer-deadline", Env: "SVC_WEBHOOK_ANSWER_DEADLINE", Def: "30m", Usage: "an accepted async webhook message neither answered nor delivered by then shows up in the outbox as unanswered", Set: settings.PositiveDuration(func(c *Config) *time.Duration { return &c.WebhookAnswerDeadline })},
	{Flag: "webhook-attempt-retention", Env: "SVC_WEBHOOK_ATTEMPT_RETENTION", Def: "168h", Usage: "how long the callback attempt log is kept", Set: settings.PositiveDuration(func(c *Config) *time.Duration { return &c.WebhookAttemptRetention })},
	{Flag: "webhook-failing-after", Env: "SVC_WEBHOOK_FAILING_AFTER", Def: "120h", Usage: "a callback endpoint failing every attempt for this long is marked failing (replies go to the outbox until a test message succeeds)", Set: settings.PositiveDuration(func(c *Config) *time.Duration { return &c.WebhookFailingAfter })},
	{Flag: "kubeconfig", Env: "SVC_KUBECONFIG", Usage: "kubernetes driver: kubeconfig file (else $KUBECONFIG, else the in-cluster config)", Set: settings.String(func(c *Config) *string { return &c.Kubeconfig })},
	{Flag: "runtime-namespace", Env: "SVC_RUNTIME_NAMESPACE", Usage: "kubernetes driver: namespace of runtime pods (default: the namespace of this pod)", Set: settings.String(func(c *Config) *string { return &c.RuntimeNamespace })},
	{Flag: "runtime-pod-template-file", Env: "SVC_RUNTIME_POD_TEMPLATE_FILE", Usage: "kubernetes driver: the runtime pod template (the chart's ConfigMap)", Set: settings.String(func(c *Config) *string { return &c.RuntimePodTemplate })},
	{Flag: "runtime-idle-timeout", Env: "SVC_RUNTIME_IDLE_TIMEOUT", Def: "30m", Usage: "kubernetes driver: stop a runtime pod no request used for this long (0: never)", Set: settings.Duration(func(c *Config) *time.Duration { return &c.RuntimeIdleTimeout })},
	{Flag: "kube-client-qps", Env: "SVC_KUBE_CLIENT_QPS", Def: "50", Usage: "kubernetes driver: requests per second of its Kubernetes client (client-go rate limit)", Set: settings.PositiveInt(func(c *Config) *int { return &c.KubeClientQPS })},
	{Flag: "kube-client-burst", Env: "SVC_KUBE_CLIENT_BURST", Def: "100", Usage: "kubernetes driver: burst of its Kubernetes client's rate limit", Set: settings.PositiveInt(func(c *Config) *int { return &c.KubeClientBurst })},
	{Flag: "runtime-pod-create-qps", Env: "SVC_RUNTIME_POD_CREATE_QPS", Def: "20", Usage: "kubernetes driver: runtime pods created per second by this replica; more wait in a queue", Set: settings.PositiveInt(func(c *Config) *int { return &c.PodCreateQPS })},
	{Flag: "runtime-pod-create-burst", Env: "SVC_RUNTIME_POD_CREATE_BURST", Def: "40", Usage: "kubernetes driver: runtime pods created at once before the rate applies", Set: settings.PositiveInt(func(c *Config) *int { return &c.PodCreateBurst })},
	{Flag: "runtime-pod-create-queue", Env: "SVC_RUNTIME_POD_CREATE_QUEUE", Def: "500", Usage: "kubernetes driver: pod creations that may wait for their turn; beyond it a first message answers 503 with Retry-After", Set: settings.PositiveInt(func(c *Config) *int { return &c.PodCreateQueue })},
	{Flag: "runtime-warm-pool-size", Env: "SVC_RUNTIME_WARM_POOL_SIZE", Def: "2", Usage: "kubernetes driver: spare runtime pods kept ready, holding no project, for the first message of a project without a pod to claim (0: none, every cold start creates its pod)", Set: settings.Int(func(c *Config) *int { return &c.WarmPoolSize })},
	{Flag: "runtime-pod-api-url", Env: "SVC_RUNTIME_POD_API_URL", Usage: "kubernetes driver: SVC_API_URL of runtime pods, replacing the template's (an API server outside the cluster)", Set: settings.String(func(c *Config) *string { return &c.RuntimePodAPIURL })},
	{Flag: "webhook-retry-schedule", Env: "SVC_WEBHOOK_RETRY_SCHEDULE", Def: "5s,5m,30m,2h,5h,10h,10h,14h,14h,14h", Usage: "delays of the API's callback attempts after the pod's own ones failed (comma-separated, ±20 % jitter each; about 3 days by default)", Set: func(c *Config, v string) error {
		if _, err := webhookqueue.ParseSchedule(v); err != nil {
			return err
		}
		c.WebhookRetrySchedule = v
		return nil
	}},
	{Flag: "webhook-queue-concurrency", Env: "SVC_WEBHOOK_QUEUE_CONCURRENCY", Def: "8", Usage: "callback attempts of the API's delivery queue in flight at once, per replica", Set: settings.PositiveInt(func(c *Config) *int { return &c.WebhookQueueConcurrency })},
	{Flag: "webhook-endpoint-max-in-flight", Env: "SVC_WEBHOOK_ENDPOINT_MAX_IN_FLIGHT", Def: "10", Usage: "per replica, callback attempts to one endpoint at once (the queue and replays; a 429 lowers it)", Set: settings.PositiveInt(func(c *Config) *int { return &c.WebhookEndpointMaxFlight })},
	{Flag: "webhook-endpoint-rate", Env: "SVC_WEBHOOK_ENDPOINT_RATE", Def: "20", Usage: "per replica, callback attempts to one endpoint per second (the queue and replays; a 429 lowers it)", Set: settings.PositiveInt(func(c *Config) *int { return &c.WebhookEndpointRate })},
	{Flag: "webhook-max-body-bytes", Env: "SVC_WEBHOOK_MAX_BODY_BYTES", Def: "1048576", Usage: "agent-proxy: body limit of a webhook message, checked before it is routed (413 above; the pod's setting of the same name)", Set: settings.PositiveInt(func(c *Config) *int64 { return &c.WebhookMaxBody })},
	{Flag: "agent-proxy-timeout", Env: "SVC_AGENT_PROXY_TIMEOUT", Def: "150s", Usage: "agent-proxy: one exchange with the agent (above the 120 s sync reply timeout)", Set: settings.Duration(func(c *Config) *time.Duration { return &c.AgentProxyTimeout })},
	{Flag: "lfs-gc-interval", Env: "SVC_LFS_GC_INTERVAL", Def: "0", Usage: "run the large-file retention job (objects no ref or tag reaches, 7-day grace) at this interval; 0: off, as large-file objects are never pruned automatically (admin lfs gc runs it by hand)", Set: settings.Duration(func(c *Config) *time.Duration { return &c.LFSGCInterval })},
},
	settings.LogOptions(func(c *Config) *logging.Options { return &c.Log }),
	settings.StorageOptions(func(c *Config) *objstore.Config { return &c.Store }))

// OutageServeFor is how long known state is served while the database is
// down: 0 in fail-closed mode.
func (c *Config) OutageServeFor() time.Duration {
	if c.DBOutageMode == "fail-closed" {
		return 0
	}
	return c.DBOutageServeFor
}

// EnvNames are the variables of the API server's settings.
func EnvNames() []string { return settings.EnvNames(options) }

// Parse reads flags from args, then fills everything not given on the
// command line from the environment (or <VAR>_FILE for secrets), then defaults.
// An SVC_ variable that no program of the service reads refuses the start;
// another program's is kept in Foreign, to be logged (settings.CheckEnviron).
func Parse(name string, args []string) (*Config, *flag.FlagSet, error) {
	foreign, err := settings.CheckEnviron(os.Environ(), EnvNames())
	if err != nil {
		return nil, nil, err
	}
	c := &Config{Foreign: foreign}
	fs, err := settings.Parse(c, name, args, os.Getenv, options)
	if err != nil {
		return nil, nil, err
	}
	if err := objstore.ValidBackend(c.Store.Backend); err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	if c.DBOutageMode != "serve" && c.DBOutageMode != "fail-closed" {
		return nil, nil, fmt.Errorf("config: SVC_DB_OUTAGE_MODE=%q: choose one of: serve, fail-closed", c.DBOutageMode)
	}
	if c.KeyBudgetLeases != "on" && c.KeyBudgetLeases != "off" {
		return nil, nil, fmt.Errorf("config: SVC_KEY_BUDGET_LEASES=%q: choose one of: on, off", c.KeyBudgetLeases)
	}
	if c.WarmPoolSize < 0 {
		return nil, nil, fmt.Errorf("config: SVC_RUNTIME_WARM_POOL_SIZE=%d: the warm pool's size cannot be negative", c.WarmPoolSize)
	}
	return c, fs, nil
}

// Help lists every setting with its flag, variable and default (the
// settings part of `apiserver serve -h` and `apiserver help serve`).
func Help() string { return settings.Help(options) }
