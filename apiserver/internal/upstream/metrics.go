package upstream

import "github.com/prometheus/client_golang/prometheus"

// routerMetrics are the per-deployment and per-key series. Keys appear by
// their name from the models file, never by value.
type routerMetrics struct {
	requests     *prometheus.CounterVec // deployment, key, outcome
	keyCooldowns *prometheus.CounterVec // provider, key
	depCooldowns *prometheus.CounterVec // deployment
	fallbacks    *prometheus.CounterVec // model
}

func newRouterMetrics(reg prometheus.Registerer) *routerMetrics {
	m := &routerMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "svc_upstream_requests_total",
			Help: "Upstream requests by deployment, key name and outcome (ok, rejected, rate_limited, unauthorized, server_error, timeout, unavailable)."},
			[]string{"deployment", "key", "outcome"}),
		keyCooldowns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "svc_upstream_key_cooldowns_total",
			Help: "Times a provider's API key was taken out of rotation after a 429 or 401/403."}, []string{"provider", "key"}),
		depCooldowns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "svc_upstream_deployment_cooldowns_total",
			Help: "Times a deployment's circuit breaker opened after consecutive failures."}, []string{"deployment"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "svc_upstream_fallbacks_total",
			Help: "Completions answered after more than one upstream attempt."}, []string{"model"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.keyCooldowns, m.depCooldowns, m.fallbacks)
	}
	return m
}
