package gateway

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the gateway's Prometheus series. A nil *Metrics records nothing.
type Metrics struct {
	duration *prometheus.HistogramVec
	upstream *prometheus.CounterVec
	// byModel caches each model's duration series per stream flag,
	// resolved on its first answer rather than hashed and looked up on every answer. The
	// models are the catalog's, so the cache is bounded by it.
	byModel sync.Map // seriesKey → prometheus.Observer
}

type seriesKey struct {
	model  string
	stream bool
}

// NewMetrics registers the series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "svc_completion_duration_seconds", Help: "Time from upstream request to the end of the answer.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}, []string{"model", "stream"}),
		upstream: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "svc_upstream_errors_total", Help: "Upstream requests that failed before an answer."}, []string{"model"}),
	}
	reg.MustRegister(m.duration, m.upstream)
	return m
}

func (m *Metrics) observe(model string, stream bool, d time.Duration) {
	if m == nil {
		return
	}
	k := seriesKey{model, stream}
	o, ok := m.byModel.Load(k)
	if !ok {
		s := "false"
		if stream {
			s = "true"
		}
		o, _ = m.byModel.LoadOrStore(k, m.duration.WithLabelValues(model, s))
	}
	o.(prometheus.Observer).Observe(d.Seconds())
}

func (m *Metrics) upstreamError(model string) {
	if m != nil {
		m.upstream.WithLabelValues(model).Inc()
	}
}
