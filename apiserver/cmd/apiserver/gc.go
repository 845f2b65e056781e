package main

import (
	"errors"
	"os"
	"runtime/debug"
	"runtime/metrics"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"go.uber.org/zap"
)

// DefaultGCPercent is the garbage collector's target the server runs with
// when GOGC is not set: a new cycle starts when the heap has grown by 400 %
// of what the last one left live, instead of Go's 100 %. The server's live
// heap is small (tens of MiB) and every request allocates, so at Go's
// default it collected several times a second under load; each cycle costs
// CPU and slows the requests it overlaps (docs/performance.md, "The garbage
// collector").
const DefaultGCPercent = 400

// memLimitRatio is the share of the container's memory limit given to the
// Go runtime as its soft limit (GOMEMLIMIT) when the operator set none: the
// collector works harder as the heap nears it, so the larger heap that
// DefaultGCPercent allows still stays inside the container's limit.
const memLimitRatio = 0.9

// gcDefaults applies DefaultGCPercent and the soft memory limit, each only
// where the operator did not set GOGC or GOMEMLIMIT (the Go runtime has
// applied those already; AUTOMEMLIMIT=off also leaves the limit unset), and
// logs what the process runs with. limit is the container's memory limit
// (memlimit.FromCgroup in the server).
func gcDefaults(limit memlimit.Provider, log *zap.Logger) {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(DefaultGCPercent)
	}
	// memlimit.Set leaves a GOMEMLIMIT from the environment alone and sets
	// no limit where the container has none.
	if _, err := memlimit.Set(memlimit.WithRatio(memLimitRatio), memlimit.WithProvider(limit)); err != nil &&
		!errors.Is(err, memlimit.ErrCgroupsNotSupported) && !errors.Is(err, memlimit.ErrNoCgroup) {
		log.Warn("reading the container's memory limit failed; no soft memory limit set", zap.Error(err))
	}
	percent, soft := gcSettings()
	log.Info("garbage collector", zap.Uint64("gc_percent", percent), zap.Uint64("soft_memory_limit_bytes", soft))
}

// gcSettings reads the runtime's GOGC and GOMEMLIMIT as they are now.
func gcSettings() (percent, softLimit uint64) {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64()
}
