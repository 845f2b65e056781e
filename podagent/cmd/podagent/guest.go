package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/config"
	"github.com/svc-dev/svc/podagent/internal/gitsync"
	"github.com/svc-dev/svc/podagent/internal/metal/guest"
	"github.com/svc-dev/svc/podagent/internal/metal/guestimage"
	"github.com/svc-dev/svc/podagent/internal/pod"
	"github.com/svc-dev/svc/podagent/internal/server"
	"github.com/svc-dev/svc/shared/logging"
	"github.com/svc-dev/svc/shared/objstore"
)

// guestMain runs the micro-VM guest (spec 10.5): as PID 1 it first brings
// the VM up (modules, network, the workspace disk); then it reads the
// host's config from the disk, swaps in a staged durable .git, checks git
// (GIT_UNUSABLE, spec 7.3) and serves the pod with the export routes.
func guestMain(args []string) int {
	isInit := guest.IsInit()
	logf := func(f string, a ...any) { fmt.Fprintf(os.Stderr, "[guest] "+f+"\n", a...) }
	end := func(code int) int {
		if isInit {
			guest.PowerOff() // PID 1 must not exit: the kernel would panic
		}
		return code
	}
	root := guest.DataDir
	if !isInit {
		fs := flag.NewFlagSet("podagent guest", flag.ContinueOnError)
		fs.StringVar(&root, "root", root, "the mounted workspace disk")
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
	} else {
		os.Setenv("PATH", "/usr/bin:/bin")
		os.Setenv("HOME", "/root")
		if err := guest.Init(guestimage.ModuleList, logf); err != nil {
			logf("init failed: %v", err)
			return end(1)
		}
		logf("ready for the agent")
	}
	gc, err := guest.ReadConfig(root)
	if err != nil {
		logf("%v", err)
		return end(2)
	}
	env := gc.PodEnv(root)
	environ := make([]string, 0, len(env))
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	foreign, err := config.CheckEnviron(environ)
	var cfg *config.Config
	if err == nil {
		cfg, err = config.Parse("podagent guest", nil, func(k string) string { return env[k] })
	}
	if cfg != nil {
		cfg.Foreign = foreign
	}
	if err != nil {
		logf("%v", err)
		return end(2)
	}
	zl, err := logging.New(cfg.Log)
	if err != nil {
		logf("%v", err)
		return end(2)
	}
	log := zl.Named("podagent").With(zap.String("mode", "guest"))
	ws, _ := filepath.Abs(cfg.WorkspaceDir)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	if _, err := guest.Hydrate(ctx, pod.NewRunner(ws), root, log); err != nil {
		log.Error("hydrating the staged .git failed", zap.Error(err))
	}
	if _, err := guest.CheckGit(ctx, ws, "/etc/gitconfig", log); err != nil {
		log.Warn("git check", zap.Error(err))
	}
	cancel()
	err = serveWith(cfg, log, nil, extras{afterTurn: guest.Sync, setup: func(p *pod.Pod, store objstore.Store) {
		g := p.Echo.Group("", server.RequireRuntimeToken(cfg.RuntimeToken))
		guest.RegisterExport(g, &exporter{p: p, store: store, key: objstore.RepoKey(cfg.ProjectID)}, guest.PowerOff)
	}})
	if err != nil {
		log.Error("podagent guest failed", zap.Error(err))
		return end(1)
	}
	return end(0)
}

// exporter is the pod as the export routes see it.
type exporter struct {
	p     *pod.Pod
	store objstore.Store
	key   string
}

func (x *exporter) CommitAndPersist(ctx context.Context) error {
	_, err := x.p.Flush(ctx, gitsync.FlushOptions{Message: "metal export", Timeout: time.Minute})
	guest.Sync()
	return err
}

func (x *exporter) OpenRepoArchive(ctx context.Context) (io.ReadCloser, error) {
	// The host exports the archive alone: fold the increments into it first.
	if m, ok := x.p.Durable.Manifest(); ok && len(m.Increments) > 0 {
		if err := x.p.Durable.Compact(ctx); err != nil {
			return nil, err
		}
	}
	rc, _, err := x.store.Get(ctx, x.key)
	return rc, err
}

func (x *exporter) SnapshotHEAD(ctx context.Context) (string, error) {
	return x.p.Sync.SnapshotHEAD(ctx)
}

func (x *exporter) Workspace() string { return x.p.Repo.Dir }
