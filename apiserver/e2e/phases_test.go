package e2e

import "testing"

// The first-reply benchmarks read the cold-start phases from /metrics.
func TestParsePhases(t *testing.T) {
	t.Parallel()
	got := parsePhases(`# HELP svc_runtime_pod_start_phase_seconds x
svc_runtime_pod_start_phase_seconds_bucket{phase="ready",le="1"} 2
svc_runtime_pod_start_phase_seconds_sum{phase="ready"} 1.5
svc_runtime_pod_start_phase_seconds_count{phase="ready"} 2
svc_runtime_pod_start_phase_seconds_sum{phase="created"} 0.25
svc_runtime_pod_start_phase_seconds_count{phase="created"} 2
svc_runtime_route_seconds_sum 3
`)
	if len(got) != 2 || got["ready"] != (phaseTotals{1.5, 2}) || got["created"] != (phaseTotals{0.25, 2}) {
		t.Fatalf("parsePhases = %+v", got)
	}
}
