package main

import (
	"math"
	"os"
	"runtime/debug"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"go.uber.org/zap"
)

// TestGCDefaults: with neither GOGC nor GOMEMLIMIT set the server runs at
// DefaultGCPercent with 90 % of the container's limit as its soft limit;
// what the operator set is left as it is. Not parallel: the settings are
// the process's.
func TestGCDefaults(t *testing.T) {
	const gib = 1 << 30
	percent0, limit0 := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetGCPercent(percent0); debug.SetMemoryLimit(limit0) })
	for _, tc := range []struct {
		name        string
		env         map[string]string
		container   memlimit.Provider
		wantPercent uint64
		wantLimit   uint64
	}{
		{"nothing set, 1 GiB container", nil, memlimit.Limit(gib), DefaultGCPercent, gib * 9 / 10},
		{"nothing set, no container limit", nil, func() (uint64, error) { return 0, memlimit.ErrNoLimit },
			DefaultGCPercent, math.MaxInt64},
		{"not in a cgroup", nil, func() (uint64, error) { return 0, memlimit.ErrNoCgroup },
			DefaultGCPercent, math.MaxInt64},
		{"GOGC set", map[string]string{"GOGC": "100"}, memlimit.Limit(gib), 100, gib * 9 / 10},
		{"GOMEMLIMIT set", map[string]string{"GOMEMLIMIT": "512MiB"}, memlimit.Limit(gib), DefaultGCPercent, math.MaxInt64},
		{"AUTOMEMLIMIT off", map[string]string{"AUTOMEMLIMIT": "off"}, memlimit.Limit(gib), DefaultGCPercent, math.MaxInt64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"GOGC", "GOMEMLIMIT", "AUTOMEMLIMIT"} {
				if v, ok := tc.env[k]; ok {
					t.Setenv(k, v)
				} else {
					t.Setenv(k, "")
					os.Unsetenv(k)
				}
			}
			// The process as the runtime started it: Go's defaults, or
			// what the environment set (here: GOGC=100, and no limit for
			// a GOMEMLIMIT the runtime would have applied itself).
			debug.SetGCPercent(100)
			debug.SetMemoryLimit(math.MaxInt64)
			gcDefaults(tc.container, zap.NewNop())
			percent, limit := gcSettings()
			if percent != tc.wantPercent || limit != tc.wantLimit {
				t.Errorf("GOGC %d, soft memory limit %d; want %d and %d", percent, limit, tc.wantPercent, tc.wantLimit)
			}
		})
	}
}
