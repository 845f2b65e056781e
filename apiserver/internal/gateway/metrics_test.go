package gateway

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Answers land in their model's and stream flag's series, through the
// cached series as on the first answer.
func TestMetricsObserveSeries(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	for range 3 {
		m.observe("a", false, time.Millisecond)
	}
	m.observe("a", true, time.Millisecond)
	m.observe("b", true, time.Millisecond)
	m.observe("b", true, time.Millisecond)
	want := map[[2]string]uint64{{"a", "false"}: 3, {"a", "true"}: 1, {"b", "true"}: 2}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[[2]string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "svc_completion_duration_seconds" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			var model, stream string
			for _, l := range mt.GetLabel() {
				switch l.GetName() {
				case "model":
					model = l.GetValue()
				case "stream":
					stream = l.GetValue()
				}
			}
			if n := mt.GetHistogram().GetSampleCount(); n > 0 {
				got[[2]string{model, stream}] = n
			}
		}
	}
	if len(got) != len(want) {
		t.Fatalf("series %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Fatalf("series %v: %d answers, want %d (all: %v)", k, got[k], n, got)
		}
	}
	if n := testutil.CollectAndCount(reg, "svc_completion_duration_seconds"); n != 3 {
		t.Fatalf("%d series, want 3 (no series before its first answer)", n)
	}
	var nilMetrics *Metrics
	nilMetrics.observe("a", true, time.Millisecond) // records nothing, no panic
}

func BenchmarkMetricsObserve(b *testing.B) {
	m := NewMetrics(prometheus.NewRegistry())
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m.observe("svc-plain", true, time.Millisecond)
		}
	})
	b.Run("WithLabelValues", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m.duration.WithLabelValues("svc-plain", "true").Observe(0.001)
		}
	})
}
