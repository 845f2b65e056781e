package main

import (
	"context"
	"errors"
	"net/http"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/config"
	"github.com/svc-dev/svc/podagent/internal/spare"
	"github.com/svc-dev/svc/podagent/internal/testhook"
)

// serveSpare runs a warm pool's spare pod (SVC_POD_UNASSIGNED,
// docs/scale.md): it serves unassigned on the pod's listener until the API
// claims it, then cold-starts the claimed project exactly as a pod created
// for it (serveWith), on the same listener, whose /readyz answers 503 until
// the project's routes take over. A SIGTERM before the claim ends it at
// once: a spare holds nothing to flush.
func serveSpare(cfg *config.Config, log *zap.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	sp, err := spare.New(spare.Options{Bootstrap: cfg.RuntimeToken,
		ClaimFile: filepath.Join(cfg.DataDir, spare.ClaimFileName), Log: log.Named("spare")})
	if err != nil {
		return err
	}
	ln, err := listen(cfg)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: sp, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("podagent serving as a spare pod", zap.String("addr", ln.Addr().String()))
	select {
	case <-sp.Claimed():
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("spare pod: http drain cut off", zap.Error(err))
		}
		log.Info("SIGTERM: the spare pod stops unclaimed")
		return nil
	}
	testhook.Reach(testhook.SpareClaimed)
	claimed, err := cfg.Assign(sp.Claim())
	if err != nil {
		_ = srv.Close()
		return err
	}
	return serveWith(claimed, log, nil, extras{spare: &spareServer{srv: srv, errc: errc, handoff: sp.Handoff}})
}

// spareServer is a claimed spare pod's server, already serving the pod's
// listener: the project's routes take over from it once the pod is ready.
type spareServer struct {
	srv     *http.Server
	errc    chan error
	handoff func(http.Handler)
}
