// Command metalhost is the micro-VM host daemon (spec 10.5; docs/design.md §2):
// it boots one QEMU guest per project running `podagent` in guest mode,
// moves every durable artifact of those guests (they hold no storage
// credentials), and serves the API the apiserver's metal runtime driver
// calls.
//
//	metalhost serve [flags]   settings from env (see -h)
//	metalhost pipe HOST:PORT  stdin/stdout <-> TCP (QEMU's guestfwd spawns it per guest connection)
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/callback"
	"github.com/svc-dev/svc/podagent/internal/metal/guestimage"
	"github.com/svc-dev/svc/podagent/internal/metal/host"
	"github.com/svc-dev/svc/shared/cli"
	"github.com/svc-dev/svc/shared/datadir"
	"github.com/svc-dev/svc/shared/logging"
	"github.com/svc-dev/svc/shared/objstore"
	_ "github.com/svc-dev/svc/shared/objstore/fs" // registers the fs backend
	_ "github.com/svc-dev/svc/shared/objstore/s3" // registers the s3 backend
	"github.com/svc-dev/svc/shared/settings"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// run is the command line: `metalhost serve [flags]` (the host daemon) and
// `metalhost pipe ADDR` (QEMU's per-connection guestfwd helper), as cobra
// verbs. No verb, an unknown one or -h of the binary exits 2 with the
// binary's help.
func run(args []string) int {
	code := 0
	root := cli.Root("metalhost", "The micro-VM host: runs each project's pod in a QEMU guest for the API's metal driver.",
		cli.Verb("serve", "Serve the host's API for the metal driver, and /metrics.", settings.Help(options), func(args []string) error {
			code = cli.Serve("metalhost", func() (*config, error) { return parse(args, os.Getenv) },
				func(c *config) logging.Options { return c.Log }, serve)
			return nil
		}),
		cli.Verb("pipe", "Connect stdin and stdout to ADDR (metalhost pipe ADDR; QEMU's guestfwd helper).", "", func(args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("%w: metalhost pipe ADDR", cli.ErrUsage)
			}
			if err := pipe(args[0]); err != nil {
				fmt.Fprintln(os.Stderr, "metalhost pipe:", err)
				code = 1
			}
			return nil
		}),
	)
	if err := cli.Run(root, args, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "metalhost:", err)
		return cli.ExitUsage
	}
	return code
}

func serve(cfg *config, log *zap.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cli.LogForeign(log, cfg.Foreign)
	sc := cfg.Store
	sc.Dir, sc.Logger = datadir.Store(cfg.DataDir), log
	store, err := objstore.Open(ctx, sc)
	if err == nil {
		// The host moves every guest's artifacts: it checks the bucket at
		// start rather than at the first export.
		if c, ok := store.(objstore.Checker); ok {
			err = c.Check(ctx)
		}
	}
	if err != nil {
		return fmt.Errorf("object store: %w", err)
	}
	t0 := time.Now()
	img, err := guestimage.Build(guestimage.Options{CacheDir: cfg.CacheDir, Agent: cfg.GuestAgent, KernelImage: cfg.Kernel})
	if err != nil {
		return err
	}
	log.Info("guest image ready", zap.String("hash", img.Hash), zap.String("kernel", img.KernelVersion), zap.Duration("took", time.Since(t0)))
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	h, err := host.New(host.Options{Store: store, Image: img, Dir: cfg.Dir, APIURL: cfg.APIURL, QEMU: cfg.QEMU,
		Accel: cfg.Accel, MemoryMB: cfg.MemoryMB, DiskMB: cfg.DiskMB, ExportInterval: cfg.ExportInterval,
		Snapshots: cfg.Snapshots, StartTimeout: cfg.StartTimeout, HealthInterval: cfg.HealthInterval,
		HealthTimeout: cfg.HealthTimeout, HealthFailures: cfg.HealthFailures, GuestEnv: cfg.GuestEnv,
		CallbackAllowedNets: cfg.CallbackAllowedNets, Registry: reg, Log: log})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h.Handler(cfg.Token, reg), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("metalhost serving", zap.String("addr", ln.Addr().String()), zap.String("accel", cfg.Accel),
		zap.Duration("exportInterval", cfg.ExportInterval), zap.Bool("snapshots", cfg.Snapshots))
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down: suspending every guest")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return h.Close(sctx)
}

// pipe connects stdin/stdout to addr until either side ends.
func pipe(addr string) error {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(conn, os.Stdin); conn.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	go func() { _, _ = io.Copy(os.Stdout, conn); done <- struct{}{} }()
	<-done
	<-done
	return nil
}

// config is every metalhost setting, declared once (flag, env, default).
type config struct {
	// Foreign are other programs' variables of the environment, logged at
	// debug.
	Foreign                                         []settings.Foreign
	HTTPAddr, Token, Dir, DataDir, CacheDir, APIURL string
	Log                                             logging.Options
	Store                                           objstore.Config
	QEMU, Accel, GuestAgent, Kernel                 string
	MemoryMB, DiskMB                                int
	ExportInterval, StartTimeout                    time.Duration
	HealthInterval, HealthTimeout                   time.Duration
	HealthFailures                                  int
	Snapshots                                       bool
	GuestEnv                                        map[string]string
	CallbackAllowedNets                             []netip.Prefix
}

var options = slices.Concat([]settings.Option[config]{
	{Flag: "http-addr", Env: "SVC_METAL_HTTP_ADDR", Def: "127.0.0.1:8090", Usage: "listen address of the host API", Set: settings.String(func(c *config) *string { return &c.HTTPAddr })},
	{Flag: "token", Env: "SVC_METAL_HOST_TOKEN", Usage: "bearer token the API's metal driver sends (required)", Secret: true, Set: settings.String(func(c *config) *string { return &c.Token })},
	{Flag: "dir", Env: "SVC_METAL_DIR", Def: "./.data/metal", Usage: "disks, snapshots, run files and quarantine/", Set: settings.String(func(c *config) *string { return &c.Dir })},
	{Flag: "cache-dir", Env: "SVC_METAL_CACHE_DIR", Usage: "guest image cache (default <dir>/images)", Set: settings.String(func(c *config) *string { return &c.CacheDir })},
	{Flag: "api-url", Env: "SVC_API_URL", Usage: "the API guests' /internal calls are relayed to (required)", Set: settings.String(func(c *config) *string { return &c.APIURL })},
	{Flag: "data-dir", Env: "SVC_DATA_DIR", Def: "./.data", Usage: "the fs object store lives in <data-dir>/store", Set: settings.String(func(c *config) *string { return &c.DataDir })},
	{Flag: "qemu", Env: "SVC_METAL_QEMU", Def: "qemu-system-x86_64", Usage: "the emulator", Set: settings.String(func(c *config) *string { return &c.QEMU })},
	{Flag: "accel", Env: "SVC_METAL_ACCEL", Def: "tcg", Usage: "QEMU accelerator: kvm on real hosts, tcg where nested KVM is unusable", Set: settings.String(func(c *config) *string { return &c.Accel })},
	{Flag: "guest-agent", Env: "SVC_METAL_GUEST_AGENT", Usage: "static podagent for the guests (default: podagent-guest beside this binary)", Set: settings.String(func(c *config) *string { return &c.GuestAgent })},
	{Flag: "kernel", Env: "SVC_METAL_KERNEL", Usage: "guest kernel vmlinuz (default: the newest /boot/vmlinuz-*)", Set: settings.String(func(c *config) *string { return &c.Kernel })},
	{Flag: "memory-mb", Env: "SVC_METAL_MEMORY_MB", Def: "256", Usage: "guest memory", Set: settings.Int(func(c *config) *int { return &c.MemoryMB })},
	{Flag: "disk-mb", Env: "SVC_METAL_DISK_MB", Def: "512", Usage: "workspace disk size (sparse)", Set: settings.Int(func(c *config) *int { return &c.DiskMB })},
	{Flag: "export-interval-ms", Env: "METAL_PROJECT_DATA_EXPORT_INTERVAL_MS", Def: "120000", Usage: ".git and writable-state export interval", Set: func(c *config, v string) error {
		ms, err := strconv.Atoi(v)
		if err != nil || ms <= 0 {
			return errors.New("must be a positive number of milliseconds")
		}
		c.ExportInterval = time.Duration(ms) * time.Millisecond
		return nil
	}},
	{Flag: "start-timeout", Env: "SVC_METAL_START_TIMEOUT", Def: "90s", Usage: "bound of one guest boot", Set: settings.Duration(func(c *config) *time.Duration { return &c.StartTimeout })},
	{Flag: "health-interval", Env: "SVC_METAL_HEALTH_INTERVAL", Def: "30s", Usage: "health gate: how often a guest's /healthz is probed", Set: settings.Duration(func(c *config) *time.Duration { return &c.HealthInterval })},
	{Flag: "health-timeout", Env: "SVC_METAL_HEALTH_TIMEOUT", Def: "10s", Usage: "health gate: bound of one probe", Set: settings.Duration(func(c *config) *time.Duration { return &c.HealthTimeout })},
	{Flag: "health-failures", Env: "SVC_METAL_HEALTH_FAILURES", Def: "3", Usage: "health gate: failed probes in a row that discard the VM (rescue first)", Set: settings.Int(func(c *config) *int { return &c.HealthFailures })},
	{Flag: "callback-allowed-nets", Env: "SVC_CALLBACK_ALLOWED_NETS", Usage: "CIDRs guests' async webhook callbacks may reach despite the host's SSRF guard", Set: func(c *config, v string) (err error) {
		c.CallbackAllowedNets, err = callback.ParseAllowedNets(v)
		return
	}},
	{Flag: "snapshots", Env: "SVC_METAL_SNAPSHOTS", Def: "true", Usage: "save the VM state at suspend for a fast resume", Set: settings.Bool(func(c *config) *bool { return &c.Snapshots })},
},
	settings.LogOptions(func(c *config) *logging.Options { return &c.Log }),
	settings.StorageOptions(func(c *config) *objstore.Config { return &c.Store }))

func parse(args []string, getenv func(string) string) (*config, error) {
	c := &config{GuestEnv: map[string]string{}}
	foreign, err := settings.CheckEnviron(os.Environ(), settings.EnvNames(options))
	if err != nil {
		return nil, err
	}
	c.Foreign = foreign
	if _, err := settings.Parse(c, "metalhost serve", args, getenv, options); err != nil {
		return nil, err
	}
	// SVC_GUEST_<NAME>=v reaches every guest's pod as SVC_<NAME>=v.
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "SVC_GUEST_") && len(k) > len("SVC_GUEST_") {
			c.GuestEnv["SVC_"+strings.TrimPrefix(k, "SVC_GUEST_")] = v
		}
	}
	if c.CacheDir == "" {
		c.CacheDir = filepath.Join(c.Dir, "images")
	}
	if c.GuestAgent == "" {
		if self, err := os.Executable(); err == nil {
			c.GuestAgent = filepath.Join(filepath.Dir(self), "podagent-guest")
		}
	}
	var errs []error
	if c.Token == "" {
		errs = append(errs, errors.New("SVC_METAL_HOST_TOKEN is required"))
	}
	if c.APIURL == "" {
		errs = append(errs, errors.New("SVC_API_URL is required (guests reach the API through the host)"))
	}
	if err := c.Store.Validate(); err != nil {
		errs = append(errs, err)
	}
	switch c.Accel {
	case "tcg", "kvm":
	default:
		errs = append(errs, fmt.Errorf("SVC_METAL_ACCEL must be tcg or kvm, not %q", c.Accel))
	}
	return c, errors.Join(errs...)
}
