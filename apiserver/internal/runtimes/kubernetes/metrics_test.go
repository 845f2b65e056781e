package kubernetes

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// The metrics docs/scale.md names, with its types and labels: what an
// operator scales on exists under those names once the driver registers.
func TestMetricsAsDocumented(t *testing.T) {
	t.Parallel()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	running := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "rt"},
		Status: corev1.PodStatus{PodIP: "10.0.0.1", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	if err := idx.Add(running); err != nil {
		t.Fatal(err)
	}
	d := &Driver{o: Options{Namespace: "rt"}, m: newMetrics(), gate: newCreateGate(1, 1, 1),
		pods: listerscorev1.NewPodLister(idx), warm: map[string]bool{}}
	// The vectors show once a label is used.
	d.m.starts.WithLabelValues(startReady).Inc()
	d.m.phase.WithLabelValues(phaseClaimed).Observe(time.Millisecond.Seconds())
	reg := prometheus.NewRegistry()
	d.RegisterMetrics(reg)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	// Each family's type, its series' label names, and svc_runtime_pods by
	// state.
	types, labels, states := map[string]string{}, map[string][][]string{}, map[string]float64{}
	for _, f := range families {
		types[f.GetName()] = f.GetType().String()
		for _, m := range f.GetMetric() {
			var names []string
			for _, l := range m.GetLabel() {
				names = append(names, l.GetName())
			}
			labels[f.GetName()] = append(labels[f.GetName()], names)
			if f.GetName() == "svc_runtime_pods" {
				states[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	for _, want := range []struct{ name, typ, label string }{
		{"svc_runtime_pod_starts_total", "COUNTER", "result"},
		{"svc_runtime_pod_start_phase_seconds", "HISTOGRAM", "phase"},
		{"svc_runtime_route_seconds", "HISTOGRAM", ""},
		{"svc_runtime_pods", "GAUGE", "state"},
		{"svc_runtime_pod_create_queued", "GAUGE", ""},
		{"svc_runtime_warm_pool_size", "GAUGE", ""},
		{"svc_runtime_warm_pool_claims_total", "COUNTER", ""},
		{"svc_runtime_warm_pool_misses_total", "COUNTER", ""},
	} {
		typ, ok := types[want.name]
		if !ok {
			t.Errorf("%s is not registered", want.name)
			continue
		}
		if typ != want.typ {
			t.Errorf("%s is a %s, want %s", want.name, typ, want.typ)
		}
		for _, names := range labels[want.name] {
			if (want.label == "" && len(names) != 0) || (want.label != "" && !slices.Equal(names, []string{want.label})) {
				t.Errorf("%s has labels %v, want %q", want.name, names, want.label)
			}
		}
	}
	if want := map[string]float64{"pending": 0, "running": 1, "terminating": 0, "ended": 0}; !maps.Equal(states, want) {
		t.Errorf("svc_runtime_pods = %v, want %v", states, want)
	}
}
