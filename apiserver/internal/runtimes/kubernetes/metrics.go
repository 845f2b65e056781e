package kubernetes

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// metrics are what an operator scales the runtime on (docs/scale.md).
type metrics struct {
	starts *prometheus.CounterVec   // svc_runtime_pod_starts_total{result}
	phase  *prometheus.HistogramVec // svc_runtime_pod_start_phase_seconds{phase}
	route  prometheus.Histogram     // svc_runtime_route_seconds
	claims prometheus.Counter       // svc_runtime_warm_pool_claims_total
	misses prometheus.Counter       // svc_runtime_warm_pool_misses_total
}

// Start results and phases (labels).
const (
	startReady     = "ready"
	startFailed    = "failed"
	startThrottled = "throttled"

	phaseClaimed   = "claimed"   // a spare of the warm pool relabelled as the project's
	phaseQueued    = "queued"    // waiting for the creation gate
	phaseCreated   = "created"   // the pod applied
	phaseScheduled = "scheduled" // PodScheduled seen
	phaseStarted   = "started"   // the pod has its IP (sandbox and containers starting)
	phaseReady     = "ready"     // Ready seen
	phaseProbed    = "probed"    // the podagent answered /readyz as the project's
)

func newMetrics() *metrics {
	return &metrics{
		starts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "svc_runtime_pod_starts_total",
			Help: "Runtime pod cold starts by result: ready, failed, throttled (refused by the creation rate limit with 503 + Retry-After)"},
			[]string{"result"}),
		phase: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "svc_runtime_pod_start_phase_seconds",
			Help:    "Time from the start of a runtime pod's cold start to each phase (claimed or queued and created, scheduled, started, ready, probed), as this replica's informer saw it",
			Buckets: []float64{.05, .1, .25, .5, 1, 2, 3, 5, 10, 20, 30, 60, 120}}, []string{"phase"}),
		route: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "svc_runtime_route_seconds",
			Help:    "Time to find a project's running pod (assignment to endpoint, no cold start)",
			Buckets: []float64{.00001, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .05}}),
		claims: prometheus.NewCounter(prometheus.CounterOpts{Name: "svc_runtime_warm_pool_claims_total",
			Help: "Cold starts that claimed a spare pod of the warm pool"}),
		misses: prometheus.NewCounter(prometheus.CounterOpts{Name: "svc_runtime_warm_pool_misses_total",
			Help: "Cold starts that found no warm spare pod (the warm pool on) and created their pod"}),
	}
}

// RegisterMetrics adds the driver's metrics to reg: the counters and
// histograms above, the pods by state and the creations queued, both read
// from this replica's informer and gate when scraped.
func (d *Driver) RegisterMetrics(reg prometheus.Registerer) {
	reg.MustRegister(d.m.starts, d.m.phase, d.m.route, d.m.claims, d.m.misses,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "svc_runtime_warm_pool_size",
			Help: "Spare runtime pods of the warm pool that are ready to be claimed, as this replica sees them"},
			func() float64 { return float64(d.warmCount()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "svc_runtime_pod_create_queued",
			Help: "Runtime pod creations waiting for the client-side creation rate limit"},
			func() float64 { return float64(d.gate.Queued()) }),
		podStates{d: d, desc: prometheus.NewDesc("svc_runtime_pods",
			"Runtime pods in this replica's informer by state: pending (not Ready yet), running (Ready), terminating, ended (failed or succeeded)",
			[]string{"state"}, nil)})
}

// podStates is svc_runtime_pods, counted from the informer at scrape time.
type podStates struct {
	d    *Driver
	desc *prometheus.Desc
}

func (c podStates) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c podStates) Collect(ch chan<- prometheus.Metric) {
	n := c.d.podsByState()
	for _, s := range []string{"pending", "running", "terminating", "ended"} {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n[s]), s)
	}
}

// podsByState counts the informer's pods by state.
func (d *Driver) podsByState() map[string]int {
	pods, _ := d.pods.Pods(d.o.Namespace).List(labels.Everything())
	n := map[string]int{}
	for _, p := range pods {
		n[podState(p)]++
	}
	return n
}

func podState(p *corev1.Pod) string {
	switch {
	case p.DeletionTimestamp != nil:
		return "terminating"
	case p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded:
		return "ended"
	case podReady(p):
		return "running"
	}
	return "pending"
}

// phases records the phases of one cold start as they are first seen.
type phases struct {
	m     *metrics
	began time.Time
	seen  map[string]bool
}

func (m *metrics) phases(began time.Time) *phases {
	return &phases{m: m, began: began, seen: map[string]bool{}}
}

// mark records phase once, at the time since the start began.
func (p *phases) mark(phase string) {
	if p.seen[phase] {
		return
	}
	p.seen[phase] = true
	p.m.phase.WithLabelValues(phase).Observe(time.Since(p.began).Seconds())
}

// observe marks the phases pod has reached.
func (p *phases) observe(pod *corev1.Pod) {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
			p.mark(phaseScheduled)
		}
	}
	if pod.Status.PodIP != "" {
		p.mark(phaseStarted)
	}
	if podReady(pod) {
		p.mark(phaseReady)
	}
}
