package main

import (
	"net/http"
	"net/http/pprof"

	"go.uber.org/zap"
)

// servePprof exposes the Go profiler on its own listener (SVC_PPROF_ADDR),
// never on the public one.
func servePprof(addr string, log *zap.Logger) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	log.Info("pprof listening", zap.String("addr", addr))
	if err := http.ListenAndServe(addr, mux); err != nil {
		log.Warn("pprof stopped", zap.Error(err))
	}
}
