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
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
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
	"github.com/svc-dev/svc/shared/logging"
	"github.com/svc-dev/svc/shared/objstore"
	fsstore "github.com/svc-dev/svc/shared/objstore/fs"
	s3store "github.com/svc-dev/svc/shared/objstore/s3"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 2 && args[0] == "pipe" {
		if err := pipe(args[1]); err != nil {
			fmt.Fprintln(os.Stderr, "metalhost pipe:", err)
			return 1
		}
		return 0
	}
	if len(args) == 0 || args[0] != "serve" {
		fmt.Fprintln(os.Stderr, "usage: metalhost serve [flags]   (metalhost serve -h lists the settings)")
		return 2
	}
	cfg, err := parse(args[1:], os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "metalhost:", err)
		return 2
	}
	log, err := logging.New(cfg.LogLevel)
	if err != nil {
		fmt.Fprintln(os.Stderr, "metalhost:", err)
		return 2
	}
	defer log.Sync()
	if err := serve(cfg, log.Named("metalhost")); err != nil {
		log.Error("metalhost failed", zap.Error(err))
		return 1
	}
	return 0
}

func serve(cfg *config, log *zap.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var store objstore.Store
	var err error
	if cfg.Storage == "s3" {
		store, err = s3store.New(ctx, s3store.Config{Endpoint: cfg.S3Endpoint, Bucket: cfg.S3Bucket,
			AccessKey: cfg.S3AccessKey, SecretKey: cfg.S3SecretKey, UseSSL: cfg.S3UseSSL})
	} else {
		store, err = fsstore.New(filepath.Join(cfg.DataDir, "store"), fsstore.Options{Logger: log})
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
	HTTPAddr, Token, Dir, DataDir, CacheDir, APIURL, LogLevel string
	Storage, S3Endpoint, S3Bucket, S3AccessKey, S3SecretKey   string
	S3UseSSL                                                  bool
	QEMU, Accel, GuestAgent, Kernel                           string
	MemoryMB, DiskMB                                          int
	ExportInterval, StartTimeout                              time.Duration
	HealthInterval, HealthTimeout                             time.Duration
	HealthFailures                                            int
	Snapshots                                                 bool
	GuestEnv                                                  map[string]string
	CallbackAllowedNets                                       []netip.Prefix
}

type option struct {
	flag, env, def, usage string
	secret                bool
	set                   func(c *config, v string) error
}

func str(p func(*config) *string) func(*config, string) error {
	return func(c *config, v string) error { *p(c) = v; return nil }
}

func integer(p func(*config) *int) func(*config, string) error {
	return func(c *config, v string) (err error) { *p(c), err = strconv.Atoi(v); return }
}

var options = []option{
	{"http-addr", "SVC_METAL_HTTP_ADDR", "127.0.0.1:8090", "listen address of the host API", false, str(func(c *config) *string { return &c.HTTPAddr })},
	{"token", "SVC_METAL_HOST_TOKEN", "", "bearer token the API's metal driver sends (required)", true, str(func(c *config) *string { return &c.Token })},
	{"dir", "SVC_METAL_DIR", "./.data/metal", "disks, snapshots, run files and quarantine/", false, str(func(c *config) *string { return &c.Dir })},
	{"cache-dir", "SVC_METAL_CACHE_DIR", "", "guest image cache (default <dir>/images)", false, str(func(c *config) *string { return &c.CacheDir })},
	{"api-url", "SVC_API_URL", "", "the API guests' /internal calls are relayed to (required)", false, str(func(c *config) *string { return &c.APIURL })},
	{"log-level", "SVC_LOG_LEVEL", "info", "debug, info, warn, error", false, str(func(c *config) *string { return &c.LogLevel })},
	{"storage", "SVC_STORAGE", "fs", "object store backend: fs or s3", false, str(func(c *config) *string { return &c.Storage })},
	{"data-dir", "SVC_DATA_DIR", "./.data", "the fs object store lives in <data-dir>/store", false, str(func(c *config) *string { return &c.DataDir })},
	{"s3-endpoint", "SVC_S3_ENDPOINT", "", "S3 endpoint host:port", false, str(func(c *config) *string { return &c.S3Endpoint })},
	{"s3-bucket", "SVC_S3_BUCKET", "svc", "S3 bucket", false, str(func(c *config) *string { return &c.S3Bucket })},
	{"s3-access-key", "SVC_S3_ACCESS_KEY", "", "S3 access key", true, str(func(c *config) *string { return &c.S3AccessKey })},
	{"s3-secret-key", "SVC_S3_SECRET_KEY", "", "S3 secret key", true, str(func(c *config) *string { return &c.S3SecretKey })},
	{"s3-use-ssl", "SVC_S3_USE_SSL", "false", "use TLS to reach S3", false, func(c *config, v string) (err error) { c.S3UseSSL, err = strconv.ParseBool(v); return }},
	{"qemu", "SVC_METAL_QEMU", "qemu-system-x86_64", "the emulator", false, str(func(c *config) *string { return &c.QEMU })},
	{"accel", "SVC_METAL_ACCEL", "tcg", "QEMU accelerator: kvm on real hosts, tcg where nested KVM is unusable", false, str(func(c *config) *string { return &c.Accel })},
	{"guest-agent", "SVC_METAL_GUEST_AGENT", "", "static podagent for the guests (default: podagent-guest beside this binary)", false, str(func(c *config) *string { return &c.GuestAgent })},
	{"kernel", "SVC_METAL_KERNEL", "", "guest kernel vmlinuz (default: the newest /boot/vmlinuz-*)", false, str(func(c *config) *string { return &c.Kernel })},
	{"memory-mb", "SVC_METAL_MEMORY_MB", "256", "guest memory", false, integer(func(c *config) *int { return &c.MemoryMB })},
	{"disk-mb", "SVC_METAL_DISK_MB", "512", "workspace disk size (sparse)", false, integer(func(c *config) *int { return &c.DiskMB })},
	{"export-interval-ms", "METAL_PROJECT_DATA_EXPORT_INTERVAL_MS", "120000", ".git and writable-state export interval (spec 8)", false, func(c *config, v string) error {
		ms, err := strconv.Atoi(v)
		if err != nil || ms <= 0 {
			return errors.New("must be a positive number of milliseconds")
		}
		c.ExportInterval = time.Duration(ms) * time.Millisecond
		return nil
	}},
	{"start-timeout", "SVC_METAL_START_TIMEOUT", "90s", "bound of one guest boot", false, func(c *config, v string) (err error) { c.StartTimeout, err = time.ParseDuration(v); return }},
	{"health-interval", "SVC_METAL_HEALTH_INTERVAL", "30s", "health gate: how often a guest's /healthz is probed", false, func(c *config, v string) (err error) { c.HealthInterval, err = time.ParseDuration(v); return }},
	{"health-timeout", "SVC_METAL_HEALTH_TIMEOUT", "10s", "health gate: bound of one probe", false, func(c *config, v string) (err error) { c.HealthTimeout, err = time.ParseDuration(v); return }},
	{"health-failures", "SVC_METAL_HEALTH_FAILURES", "3", "health gate: failed probes in a row that discard the VM (rescue first)", false, integer(func(c *config) *int { return &c.HealthFailures })},
	{"callback-allowed-nets", "SVC_CALLBACK_ALLOWED_NETS", "", "CIDRs guests' async webhook callbacks may reach despite the host's SSRF guard", false, func(c *config, v string) (err error) {
		c.CallbackAllowedNets, err = callback.ParseAllowedNets(v)
		return
	}},
	{"snapshots", "SVC_METAL_SNAPSHOTS", "true", "save the VM state at suspend for a fast resume", false, func(c *config, v string) (err error) { c.Snapshots, err = strconv.ParseBool(v); return }},
}

func parse(args []string, getenv func(string) string) (*config, error) {
	fs := flag.NewFlagSet("metalhost serve", flag.ContinueOnError)
	vals := make([]*string, len(options))
	for i, o := range options {
		usage := fmt.Sprintf("%s (env %s", o.usage, o.env)
		if o.secret {
			usage += " or " + o.env + "_FILE"
		}
		if o.def != "" {
			usage += fmt.Sprintf(", default %q", o.def)
		}
		vals[i] = fs.String(o.flag, "", usage+")")
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	c := &config{GuestEnv: map[string]string{}}
	for i, o := range options {
		v := *vals[i]
		if !given[o.flag] {
			v = getenv(o.env)
			if v == "" && o.secret && getenv(o.env+"_FILE") != "" {
				b, err := os.ReadFile(getenv(o.env + "_FILE"))
				if err != nil {
					return nil, fmt.Errorf("%s_FILE: %w", o.env, err)
				}
				v = strings.TrimSpace(string(b))
			}
			if v == "" {
				v = o.def
			}
		}
		if err := o.set(c, v); err != nil {
			return nil, fmt.Errorf("%s: %w", o.env, err)
		}
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
	switch c.Storage {
	case "fs":
	case "s3":
		if c.S3Endpoint == "" || c.S3Bucket == "" {
			errs = append(errs, errors.New("SVC_STORAGE=s3 needs SVC_S3_ENDPOINT and SVC_S3_BUCKET"))
		}
	default:
		errs = append(errs, fmt.Errorf("SVC_STORAGE must be fs or s3, not %q", c.Storage))
	}
	switch c.Accel {
	case "tcg", "kvm":
	default:
		errs = append(errs, fmt.Errorf("SVC_METAL_ACCEL must be tcg or kvm, not %q", c.Accel))
	}
	return c, errors.Join(errs...)
}
