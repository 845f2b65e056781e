// Command podagent is the pod-side agent of one project (docs/design.md §5).
//
//	podagent serve [flags]   settings from SVC_* env (see -h)
//	podagent paired --api URL --token PAIRING_TOKEN [flags]   serve the agent through a tunnel (internal/pairedmachine)
//	podagent guest [--root DIR]   micro-VM guest mode (internal/metal/guest); also PID 1 of a guest
//	                              (SVC_METAL_GUEST_INIT=1 from the guest kernel's command line; PID 1 of a container serves normally)
//
// serve cold-starts the workspace (spec 10.1.5), serves /healthz, /readyz,
// /metrics and /agent/* (runtime-token bearer), and on SIGTERM runs the
// shutdown sequence of spec 10.2 before exiting.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/config"
	"github.com/svc-dev/svc/podagent/internal/metal/guest"
	"github.com/svc-dev/svc/podagent/internal/pairedmachine"
	"github.com/svc-dev/svc/podagent/internal/pod"
	"github.com/svc-dev/svc/podagent/internal/shutdown"
	"github.com/svc-dev/svc/shared/cli"
	"github.com/svc-dev/svc/shared/datadir"
	"github.com/svc-dev/svc/shared/logging"
	"github.com/svc-dev/svc/shared/objstore"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// run is the command line: one cobra verb per mode, each handed its
// arguments (its settings' flags, -flag or --flag). PID 1 of a micro-VM
// guest is the guest mode whatever its arguments. No verb, an unknown one
// or -h of the binary exits 2 with the binary's help.
func run(args []string) int {
	if guest.IsInit() {
		return guestMain(args)
	}
	code := 0
	verb := func(f func(args []string) int) func([]string) error {
		return func(args []string) error { code = f(args); return nil }
	}
	root := cli.Root("podagent", "The pod-side agent of one project: its git work tree, the agent's tool loop, sync and the webhook channel.",
		cli.Verb("serve", "Serve one project's pod: cold start, /agent/* routes, the shutdown flush on SIGTERM.", config.Help(),
			verb(serveMain)),
		cli.Verb("paired", "Serve the agent from this machine through a tunnel to the API (podagent paired --api URL --token TOKEN [pod flags]).",
			pairedmachine.Help()+"\nand the pod's settings, as for serve:\n\n"+config.Help(),
			verb(func(args []string) int { return pairedmachine.Main(args, serve) })),
		cli.Verb("guest", "Micro-VM guest mode (podagent guest [--root DIR]); also PID 1 of a guest (SVC_METAL_GUEST_INIT=1).", "",
			verb(func(args []string) int { return guestMain(append([]string{"guest"}, args...)) })),
	)
	if err := cli.Run(root, args, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "podagent:", err)
		return cli.ExitUsage
	}
	return code
}

// serveMain is `podagent serve [flags]`.
func serveMain(args []string) int {
	return cli.Serve("podagent", func() (*config.Config, error) {
		foreign, err := config.CheckEnviron(os.Environ())
		if err != nil {
			return nil, err
		}
		c, err := config.Parse("podagent serve", args, os.Getenv)
		if c != nil {
			c.Foreign = foreign
		}
		return c, err
	},
		func(c *config.Config) logging.Options { return c.Log },
		func(c *config.Config, log *zap.Logger) error {
			if c.Unassigned {
				return serveSpare(c, log)
			}
			return serve(c, log, nil)
		})
}

// serve runs the pod on ln (nil: TCP on cfg.HTTPAddr, opened once the pod
// is ready; paired mode passes its tunnel listener, which dials lazily).
func serve(cfg *config.Config, log *zap.Logger, ln net.Listener) error {
	return serveWith(cfg, log, ln, extras{})
}

// listen opens the pod's HTTP listener: the socket the runtime driver
// handed over (SVC_HTTP_LISTEN_FD; opened by the driver on a port nobody else
// holds), else a new one on SVC_HTTP_ADDR.
func listen(cfg *config.Config) (net.Listener, error) {
	if cfg.HTTPListenFD <= 0 {
		return net.Listen("tcp", cfg.HTTPAddr)
	}
	f := os.NewFile(uintptr(cfg.HTTPListenFD), "http-listener")
	if f == nil {
		return nil, fmt.Errorf("SVC_HTTP_LISTEN_FD=%d is not an open descriptor", cfg.HTTPListenFD)
	}
	defer f.Close() // FileListener holds its own duplicate
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("SVC_HTTP_LISTEN_FD=%d: %w", cfg.HTTPListenFD, err)
	}
	return ln, nil
}

// extras adapt serve to a mode: the micro-VM guest adds its export routes
// and flushes its disk after each turn.
type extras struct {
	setup     func(p *pod.Pod, store objstore.Store)
	afterTurn func()
	// spare, when set, is a claimed spare pod's server on the pod's
	// listener (serveSpare): the pod's routes take it over.
	spare *spareServer
}

func serveWith(cfg *config.Config, log *zap.Logger, ln net.Listener, x extras) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cli.LogForeign(log, cfg.Foreign)
	if cfg.PprofAddr != "" {
		// Before cold start, so the restore itself can be profiled.
		pl, err := net.Listen("tcp", cfg.PprofAddr)
		if err != nil {
			return fmt.Errorf("pprof listener: %w", err)
		}
		ps := servePprof(pl, log)
		defer ps.Close()
	}

	// One owner per workspace, before cold start clears or restores
	// anything in it.
	lock, err := datadir.AcquireDir(cfg.WorkspaceDir, "SVC_WORKSPACE_DIR")
	if err != nil {
		return err
	}
	defer lock.Release()
	store, err := pod.OpenStore(ctx, cfg, log)
	if err != nil {
		return fmt.Errorf("object store: %w", err)
	}
	p, err := pod.Start(ctx, pod.Options{Config: cfg, Store: store, Log: log, Webhook: cfg.Webhook, AfterTurn: x.afterTurn})
	if err != nil {
		return err
	}
	if x.setup != nil {
		x.setup(p, store)
	}
	var srv *http.Server
	var errc chan error
	if x.spare != nil {
		srv, errc = x.spare.srv, x.spare.errc
		x.spare.handoff(p.Echo)
		log.Info("podagent serving the claimed project", zap.String("mode", string(cfg.Mode)),
			zap.String("head", p.ColdStart.Head), zap.Duration("coldStart", p.ColdStart.Took))
	} else {
		if ln == nil {
			if ln, err = listen(cfg); err != nil {
				p.Close()
				return err
			}
		}
		srv = &http.Server{Handler: p.Echo, ReadHeaderTimeout: 10 * time.Second}
		if pl, ok := ln.(interface{ Protocols() *http.Protocols }); ok {
			srv.Protocols = pl.Protocols()
		}
		errc = make(chan error, 1)
		go func() { errc <- srv.Serve(ln) }()
		log.Info("podagent serving", zap.String("addr", ln.Addr().String()), zap.String("mode", string(cfg.Mode)),
			zap.String("head", p.ColdStart.Head), zap.Duration("coldStart", p.ColdStart.Took))
	}

	select {
	case err := <-errc:
		p.Close()
		return err
	case <-ctx.Done():
	}
	stop()
	// The sequence fits the runtime's grace period: the final git flush,
	// the HEAD snapshot and the S3 flush keep their 5 s, 5 s and 10 s, the
	// drain gets the rest.
	deadline := shutdown.Deadline(time.Now(), cfg.ShutdownGrace)
	log.Info("SIGTERM: shutting down", zap.Duration("grace", cfg.ShutdownGrace),
		zap.Time("drainUntil", shutdown.DrainDeadline(deadline)))
	// 10.2.1: drain in-flight requests, then in-flight turns (in Shutdown).
	hctx, cancel := context.WithDeadline(context.Background(), shutdown.DrainDeadline(deadline))
	defer cancel()
	if err := srv.Shutdown(hctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("http drain cut off to leave the flushes their time", zap.Error(err))
	}
	sctx, scancel := context.WithDeadline(context.Background(), deadline)
	defer scancel()
	res := p.Shutdown(sctx)
	log.Info("shutdown complete", zap.String("mode", string(cfg.Mode)), zap.String("durability", res.Durability),
		zap.String("coldStartPath", res.Path), zap.Bool("coldStartTarballWritten", res.ColdStartWritten),
		zap.NamedError("gitFlush", res.GitFlushErr), zap.NamedError("s3Flush", res.S3FlushErr))
	return nil
}
