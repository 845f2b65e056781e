package gitsync

// The pod's Prometheus collectors (docs/design.md §5, /metrics): persist
// duration, persist failures, degraded state, checkpoint records pending
// and fencing, all of them set by the sync engine.

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics is one registry and its collectors (not the global registry, so
// tests and several pods in one process do not collide).
type Metrics struct {
	Registry        *prometheus.Registry
	PersistDuration prometheus.Histogram
	PersistFailures prometheus.Counter
	Degraded        prometheus.Gauge
	RecordsPending  prometheus.Gauge
	Fenced          prometheus.Gauge
	// TurnsWaiting counts the turns (a rollback, a flush, a message) waiting
	// for the one running (package turn's Slot).
	TurnsWaiting prometheus.Gauge
}

// gauge is a svc_podagent_<name> gauge.
func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "svc", Subsystem: "podagent", Name: name, Help: help})
}

// NewMetrics registers the collectors (plus Go and process collectors).
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		PersistDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "svc", Subsystem: "podagent", Name: "persist_duration_seconds",
			Help:    "Time to archive and upload .git as <projectId>/repo.git.tar.gz, per attempt series (successful or not).",
			Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}),
		PersistFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "svc", Subsystem: "podagent", Name: "persist_failures_total",
			Help: "Failed durability steps (persist of .git).",
		}),
		Degraded:       gauge("cloud_sync_degraded", "1 while the pod is in the degraded durability state, else 0."),
		RecordsPending: gauge("checkpoint_records_pending", "Commits made but not yet recorded as checkpoint rows."),
		Fenced:         gauge("durable_fenced", "1 once another writer was detected on this project's repo.git.tar.gz; the pod stopped writing it."),
		TurnsWaiting:   gauge("turns_waiting", "Turns (rollbacks, flushes, messages) waiting for the running turn to end."),
	}
	m.Registry.MustRegister(m.PersistDuration, m.PersistFailures, m.Degraded, m.RecordsPending, m.Fenced, m.TurnsWaiting,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
