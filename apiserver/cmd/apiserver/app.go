package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/admin"
	"github.com/svc-dev/svc/apiserver/internal/agentproxy"
	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/config"
	"github.com/svc-dev/svc/apiserver/internal/console"
	"github.com/svc-dev/svc/apiserver/internal/hydrate"
	"github.com/svc-dev/svc/apiserver/internal/janitor"
	"github.com/svc-dev/svc/apiserver/internal/lfsgc"
	"github.com/svc-dev/svc/apiserver/internal/pairing"
	"github.com/svc-dev/svc/apiserver/internal/parity"
	"github.com/svc-dev/svc/apiserver/internal/runtimes"
	kubedriver "github.com/svc-dev/svc/apiserver/internal/runtimes/kubernetes"
	"github.com/svc-dev/svc/apiserver/internal/runtimes/local"
	"github.com/svc-dev/svc/apiserver/internal/runtimes/metal"
	"github.com/svc-dev/svc/apiserver/internal/server"
	"github.com/svc-dev/svc/apiserver/internal/storage"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/tracing"
	"github.com/svc-dev/svc/apiserver/internal/upstream"
	"github.com/svc-dev/svc/apiserver/internal/webhooklog"
	"github.com/svc-dev/svc/apiserver/internal/webhookqueue"
	"github.com/svc-dev/svc/shared/cli"
	"github.com/svc-dev/svc/shared/datadir"
	"github.com/svc-dev/svc/shared/logging"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/wait"
	"github.com/svc-dev/svc/shared/webhooksend"
)

type app struct {
	cfg   *config.Config
	log   *zap.Logger
	store *store.Store
	cat   *catalog.Catalog
	kube  *kubedriver.Driver // SVC_RUNTIME_DRIVER=kubernetes
}

func open(name string, args []string) (*app, []string, error) {
	cfg, fs, err := config.Parse(name, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, nil, fmt.Errorf("%w", admin.ErrUsage)
		}
		return nil, nil, err
	}
	log, err := logging.New(cfg.Log)
	if err != nil {
		return nil, nil, err
	}
	cli.LogForeign(log, cfg.Foreign)
	cat, err := catalog.Load(catalog.Options{ModelsFile: cfg.ModelsFile, PlansFile: cfg.PlansFile,
		UpstreamBaseURL: cfg.UpstreamBaseURL, UpstreamAPIKey: cfg.UpstreamAPIKey})
	if err != nil {
		return nil, nil, err
	}
	st, err := store.Open(cfg.DatabaseURL, cfg.DataDir)
	if err != nil {
		return nil, nil, err
	}
	st.SetMaxConns(cfg.DatabaseMaxConns)
	return &app{cfg: cfg, log: log, store: st, cat: cat}, fs.Args(), nil
}

func (a *app) close() {
	_ = a.store.Close()
	_ = a.log.Sync()
}

func migrate(ctx context.Context, args []string) error {
	a, _, err := open("apiserver migrate", args)
	if err != nil {
		return err
	}
	defer a.close()
	return a.store.Migrate(ctx)
}

func runAdmin(ctx context.Context, args []string) error {
	// Global flags come before the command words: admin [--database-url …] key create …
	i := 0
	for i < len(args) && strings.HasPrefix(args[i], "-") {
		i++
		if i < len(args) && !strings.Contains(args[i-1], "=") && !strings.HasPrefix(args[i], "-") {
			i++
		}
	}
	a, _, err := open("apiserver admin", args[:i])
	if err != nil {
		return err
	}
	defer a.close()
	if err := a.store.Migrate(ctx); err != nil {
		return err
	}
	return admin.Run(ctx, a.adminEnv(), args[i:])
}

func (a *app) adminEnv() *admin.Env {
	secret := a.cfg.RuntimeAuthSecret
	if secret == "" {
		// `make run` keeps its runtime secret in the data dir (devSecret).
		if b, err := os.ReadFile(datadir.RuntimeSecret(a.cfg.DataDir)); err == nil {
			secret = strings.TrimSpace(string(b))
		}
	}
	return &admin.Env{Store: a.store, Catalog: a.cat, RuntimeSecret: []byte(secret),
		Out: os.Stdout, In: os.Stdin, PublicURL: storage.PublicURL(a.cfg), Publish: publishFunc, Log: a.log,
		Objects: func(ctx context.Context) (objstore.Store, error) {
			o, err := storage.Open(ctx, a.cfg, a.log)
			return o.Store, err
		}}
}

func serve(ctx context.Context, args []string, dev bool) error {
	a, _, err := open("apiserver serve", args)
	if err != nil {
		return err
	}
	defer a.close()
	gcDefaults(memlimit.FromCgroup, a.log)
	// One owner per data dir, before anything in it is cleared (the
	// hydrated copies below): a second replica on the same directory
	// would destroy the first one's state.
	lock, err := datadir.Acquire(a.cfg.DataDir, "SVC_DATA_DIR")
	if err != nil {
		return err
	}
	defer lock.Release()
	if err := a.store.Migrate(ctx); err != nil {
		return err
	}
	if dev && a.cfg.RuntimeAuthSecret == "" {
		secret, err := devSecret(a.cfg.DataDir)
		if err != nil {
			return err
		}
		a.cfg.RuntimeAuthSecret = secret
	}
	objs, err := storage.Open(ctx, a.cfg, a.log)
	if err != nil {
		return err
	}
	objs.Health.Start(ctx)
	hyd, err := hydrate.New(hydrate.Options{Store: objs.Store, Dir: datadir.Hydrated(a.cfg.DataDir),
		Checkpoints: a.store, DiskBudget: a.cfg.HydrateDiskBudget, Log: a.log})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", a.cfg.HTTPAddr)
	if err != nil {
		return err
	}
	advertise, err := advertiseURL(a.cfg.AdvertiseURL, ln.Addr())
	if err != nil {
		return err
	}
	if a.cfg.RuntimeDriver == kubedriver.Name {
		if a.kube, err = a.kubernetesDriver(ctx); err != nil {
			_ = ln.Close()
			return err
		}
	}
	proxy, relay, hub, router, err := a.runtimeDeps(ln.Addr(), advertise)
	if err != nil {
		_ = ln.Close()
		return err
	}
	endpoint := a.cfg.OTLPEndpoint
	if endpoint == "" {
		endpoint = tracing.Endpoint(os.Getenv)
	}
	tracer, stopTracing, err := tracing.Setup(ctx, endpoint, "svc-apiserver")
	if err != nil {
		return err
	}
	defer func() {
		tctx, tcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer tcancel()
		if err := stopTracing(tctx); err != nil {
			a.log.Warn("flushing traces failed", zap.Error(err))
		}
	}()
	if tracer.On() {
		a.log.Info("tracing on: spans exported over OTLP/HTTP", zap.String("endpoint", endpoint))
	}
	c := a.cfg
	allowed, err := webhooksend.ParseAllowedNets(c.CallbackAllowed)
	if err != nil {
		return err
	}
	var schedule webhookqueue.Schedule
	if c.WebhookRetrySchedule != "" {
		if schedule, err = webhookqueue.ParseSchedule(c.WebhookRetrySchedule); err != nil {
			return err
		}
	}
	srv := server.New(server.Deps{
		Store: a.store, Catalog: a.cat, Log: a.log, Tracer: tracer,
		Upstream: upstream.New(upstream.Options{HeaderTimeout: c.UpstreamTimeout, Propagator: tracer.Propagator(),
			MaxIdleConnsPerHost: c.UpstreamMaxIdlePerHost, IdleConnTimeout: c.UpstreamIdleTimeout}),
		Routing: upstream.RouterOptions{MaxAttempts: c.UpstreamMaxAttempts, BreakerFailures: c.UpstreamBreakerFailures,
			BreakerCooldown: c.UpstreamCooldown, KeyCooldown: c.UpstreamKeyCooldown,
			BackoffBase: c.UpstreamBackoffBase, BackoffMax: c.UpstreamBackoffMax},
		RuntimeSecret: []byte(a.cfg.RuntimeAuthSecret), MaxBodyBytes: a.cfg.MaxBodyBytes,
		Hydrate: hyd, ObjectsHandler: objs.Handler, Objects: objs.Store,
		AgentProxy: proxy, Pairing: hub, Relay: relay, AnswerDeadline: a.cfg.WebhookAnswerDeadline,
		WebhookFailingAfter: a.cfg.WebhookFailingAfter,
		WebhookQueue: webhookqueue.Options{Schedule: schedule,
			Concurrency: a.cfg.WebhookQueueConcurrency},
		CallbackAllowed: allowed, WebhookMaxInFlight: a.cfg.WebhookEndpointMaxFlight,
		WebhookRate:         float64(a.cfg.WebhookEndpointRate),
		StorageErr:          objs.Health.Err,
		OutageServeFor:      c.OutageServeFor(),
		PerRequestKeyBudget: c.KeyBudgetLeases == "off",
		UsageSpoolDir:       filepath.Join(c.DataDir, "spool"),
		Timeouts:            server.Timeouts{ReadHeader: c.HTTPReadHeaderTimeout, Idle: c.HTTPIdleTimeout, Write: c.HTTPWriteTimeout},
		Console: &console.Options{PublicURL: storage.PublicURL(a.cfg),
			SecureCookies: strings.HasPrefix(storage.PublicURL(a.cfg), "https://")},
	})
	for _, name := range slices.Sorted(maps.Keys(a.cat.Providers)) {
		p := a.cat.Providers[name]
		if p.Type == "dev" {
			a.log.Warn("provider answers through the built-in dev upstream (no model behind replies); set SVC_UPSTREAM_BASE_URL for a real upstream",
				zap.String("provider", name))
			continue
		}
		a.log.Info("provider upstream", zap.String("provider", name), zap.String("type", p.Type), zap.String("baseUrl", p.BaseURL))
	}
	a.log.Info("apiserver listening", zap.String("addr", ln.Addr().String()), zap.String("advertise", advertise))
	if dev {
		if err := bootstrapDemo(ctx, a, ln.Addr().String()); err != nil {
			return err
		}
	}
	if a.cfg.PprofAddr != "" {
		go servePprof(a.cfg.PprofAddr, a.log)
	}
	if a.kube != nil {
		a.kube.RegisterMetrics(srv.Registry)
	}
	// Usage partitions (PostgreSQL): days made ahead, expired ones dropped
	// past SVC_USAGE_RETENTION (docs/gateway.md, Usage at scale).
	go wait.EveryFromNow(ctx, time.Hour, func(ctx context.Context) {
		res, err := a.store.MaintainUsagePartitions(ctx, time.Now(), a.cfg.UsageRetention)
		if err != nil {
			a.log.Warn("usage partition maintenance", zap.Error(err))
			return
		}
		if len(res.Created)+len(res.Dropped) > 0 {
			a.log.Info("usage partitions", zap.Strings("created", res.Created), zap.Strings("dropped", res.Dropped))
		}
	})
	go (&janitor.Janitor{Store: a.store, Log: a.log.Named("janitor"), AttemptRetention: a.cfg.WebhookAttemptRetention}).Run(ctx, janitor.Interval)
	// The API's callback delivery queue (docs/webhook-delivery.md).
	go srv.Queue.Run(ctx)
	// Range replays marked in the database, this replica's share.
	go srv.Recovery.Run(ctx, 0)
	// svc_webhook_endpoints_failing.
	go srv.Webhooks.Job(ctx, a.store, webhooklog.GaugeInterval)
	// Large-file retention (spec 10.3): unreachable objects past the grace
	// period. Off unless SVC_LFS_GC_INTERVAL is set: the spec never
	// auto-prunes (docs/sync-modes.md §4).
	lgc := &lfsgc.GC{Objects: objs.Store, Log: a.log, Metrics: lfsgc.NewMetrics(srv.Registry)}
	if a.cfg.LFSGCInterval > 0 {
		go lgc.Job(ctx, func(ctx context.Context) ([]string, error) {
			ps, err := a.store.ProjectsInModes(ctx)
			ids := make([]string, 0, len(ps))
			for _, p := range ps {
				ids = append(ids, p.ID)
			}
			return ids, err
		}, a.cfg.LFSGCInterval)
	}
	a.log.Info("large-file retention job", zap.Bool("enabled", a.cfg.LFSGCInterval > 0),
		zap.Duration("interval", a.cfg.LFSGCInterval))
	// Parity of the rollout (spec 10.6.4): svc_parity_mismatches{mode}.
	go (&parity.Checker{Store: a.store, Objects: objs.Store}).Job(ctx, parity.NewGauge(srv.Registry), parity.JobInterval,
		parity.Window, func(err error) { a.log.Warn("parity check", zap.Error(err)) })
	hs := srv.HTTPServer()
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(srv.Streams.Listen(ln)) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	a.log.Info("apiserver shutting down")
	// The runtimes stop first, while this server still listens: a local
	// pod's shutdown (spec 10.2) drains the requests proxied to it and then
	// calls this server — its final checkpoint record, a dual_shadow pod's
	// final push to the git endpoint — so the listener must outlive it.
	// No new pod starts meanwhile (the local driver refuses starts once
	// closing); tunnels are dropped.
	rctx, rcancel := context.WithTimeout(context.Background(), a.cfg.RuntimeStopGrace+5*time.Second)
	_ = router.Close(rctx)
	rcancel()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = hs.Shutdown(sctx)
	// Streams relayed on taken-over connections: drained within the same
	// deadline, then cut (after metering what they saw).
	if serr := srv.Streams.Shutdown(sctx); serr != nil {
		a.log.Warn("open streams cut at shutdown", zap.Error(serr))
	}
	if cerr := srv.Close(sctx); cerr != nil {
		a.log.Error("usage records not written before shutdown", zap.Error(cerr))
	}
	return err
}

// runtimeDeps builds the agent-proxy over the runtime router: the
// configured default driver (local: one podagent per project) and the paired
// machines' hub, plus the relay proxy other replicas reach this one's tunnels
// through. Local pods reach this server on loopback at addr's port.
func (a *app) runtimeDeps(addr net.Addr, advertise string) (*agentproxy.Proxy, *agentproxy.Proxy, *pairing.Hub, *runtimes.Router, error) {
	secret := []byte(a.cfg.RuntimeAuthSecret)
	port := addr.(*net.TCPAddr).Port
	var def runtimes.Driver
	switch a.cfg.RuntimeDriver {
	case local.Name:
		c := a.cfg
		def = local.New(local.Options{Binary: c.PodagentBin, APIURL: fmt.Sprintf("http://127.0.0.1:%d", port),
			DataDir: c.DataDir, RuntimeSecret: secret, StartTimeout: c.RuntimeStartTimeout, StopGrace: c.RuntimeStopGrace,
			Env: local.PodEnv(c.Store.Backend, c.Store.Endpoint, c.Store.Bucket, c.Store.AccessKey, c.Store.SecretKey, c.Store.UseSSL, c.CallbackAllowed),
			Log: a.log})
	case kubedriver.Name:
		def = a.kube
	case metal.Name:
		d, err := metal.New(metal.Options{HostURL: a.cfg.MetalHostURL, HostToken: a.cfg.MetalHostToken, RuntimeSecret: secret,
			StartTimeout: a.cfg.RuntimeStartTimeout, Log: a.log})
		if err != nil {
			// Unavailable is a start-up error too, not a warning followed
			// by agent_start_failed on every webhook request.
			return nil, nil, nil, nil, fmt.Errorf("config: SVC_RUNTIME_DRIVER=metal: %w", err)
		}
		def = d
	default:
		// An unknown driver is a start-up error naming the valid ones, not a
		// warning followed by 503s (Gitea's NewStorage).
		return nil, nil, nil, nil, fmt.Errorf("config: SVC_RUNTIME_DRIVER=%q is not a runtime driver of this build; choose one of: %s",
			a.cfg.RuntimeDriver, strings.Join(runtimeDrivers, ", "))
	}
	transport := agentproxy.NewTransport()
	hub := pairing.NewHub(pairing.Options{Store: a.store, RuntimeSecret: secret, AdvertiseURL: advertise,
		RelayTransport: transport, Log: a.log})
	router := &runtimes.Router{Store: a.store, Default: def, Paired: hub, Instance: store.NewID("api"), Log: a.log.Named("runtime")}
	proxy := &agentproxy.Proxy{Runtime: router, Transport: transport, Timeout: a.cfg.AgentProxyTimeout,
		Channels: a.store, MaxBodyBytes: a.cfg.WebhookMaxBody, Log: a.log.Named("agentproxy")}
	relay := &agentproxy.Proxy{Runtime: hub.Local(), Relay: true, Prefixes: agentproxy.RelayPrefixes, Timeout: a.cfg.AgentProxyTimeout,
		Log: a.log.Named("relay")}
	return proxy, relay, hub, router, nil
}

// runtimeDrivers are the SVC_RUNTIME_DRIVER values runtimeDeps knows; add a
// driver's name here with its case.
var runtimeDrivers = []string{local.Name, kubedriver.Name, metal.Name}

// advertiseURL is SVC_ADVERTISE_URL, or http://<listen addr>; when the server
// listens on every interface, the host part is the first non-loopback
// address of this host (a pod's IP), else loopback.
func advertiseURL(configured string, addr net.Addr) (string, error) {
	if configured != "" {
		u, err := url.Parse(configured)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "", fmt.Errorf("config: SVC_ADVERTISE_URL must be an http(s) base URL, not %q", configured)
		}
		return strings.TrimSuffix(configured, "/"), nil
	}
	tcp := addr.(*net.TCPAddr)
	ip := tcp.IP
	if ip == nil || ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
		if addrs, err := net.InterfaceAddrs(); err == nil {
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok && n.IP.IsGlobalUnicast() {
					ip = n.IP
					break
				}
			}
		}
	}
	return "http://" + net.JoinHostPort(ip.String(), strconv.Itoa(tcp.Port)), nil
}

// devSecret keeps a random runtime secret in the dev data dir so pods started
// by `make run` keep valid tokens across restarts.
func devSecret(dataDir string) (string, error) {
	path := datadir.RuntimeSecret(dataDir)
	if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", err
	}
	secret := store.NewID("rts") + store.NewID("x")
	return secret, os.WriteFile(path, []byte(secret), 0o600)
}
