package server

import (
	"github.com/svc-dev/svc/apiserver/internal/agentapi"
	"github.com/svc-dev/svc/apiserver/internal/checkpointreads"
	"github.com/svc-dev/svc/apiserver/internal/console"
	"github.com/svc-dev/svc/apiserver/internal/gateway"
	"github.com/svc-dev/svc/apiserver/internal/gitserver"
	"github.com/svc-dev/svc/apiserver/internal/metering"
	"github.com/svc-dev/svc/apiserver/internal/publish"
	"github.com/svc-dev/svc/apiserver/internal/upstream"
	"github.com/svc-dev/svc/apiserver/internal/webhookapi"
)

// handlers are every handler value of the server, built once in New from
// Deps; routes only mounts them. A nil field is a surface whose Deps are
// absent, and routes leaves its paths unmounted.
type handlers struct {
	api *gateway.API
	// agent serves every call of a project's pod (runtime token).
	agent *agentapi.API
	// reads is the one checkpoint-reads value: the API's routes and the
	// console's project pages both read through it.
	reads   *checkpointreads.API
	git     *gitserver.Server
	publish *publish.API
	console *console.Console
	// webhooks serves the member-facing webhook routes: the outbox
	// long-poll, the callback attempt log, endpoint health, replay and test
	// messages.
	webhooks *webhookapi.Handlers
}

// buildHandlers builds the handlers of d for s (whose Auth, Registry,
// Usage, Outbox and Streams are set).
func (s *Server) buildHandlers(d Deps) (handlers, error) {
	routing := d.Routing
	routing.Registerer, routing.Tracer, routing.Log = s.Registry, d.Tracer, d.Log.Named("upstream")
	meter := metering.New(d.Store, s.Usage)
	meter.ServeFor = d.OutageServeFor
	meter.PerRequestBudget = d.PerRequestKeyBudget
	// Settlements a budget lease covers are written together, per key
	// (metering/settle_defer.go), off the request path.
	meter.SettleDelay = metering.LeasedSettleDelay
	h := handlers{
		api: &gateway.API{Catalog: d.Catalog, Meter: meter,
			Router: upstream.NewRouter(d.Upstream, d.Catalog, routing), Tracer: d.Tracer,
			Log: d.Log.Named("gateway"), MaxBody: d.MaxBodyBytes, Metrics: gateway.NewMetrics(s.Registry),
			Streams: s.Streams},
		agent: &agentapi.API{Store: d.Store, Outbox: s.Outbox, Attempts: s.Webhooks, Objects: d.Objects,
			Log: d.Log.Named("agentapi")},
		webhooks: &webhookapi.Handlers{Outbox: s.Outbox, Log: s.Webhooks, Channels: d.Store, Recovery: s.Recovery},
	}
	if d.AgentProxy != nil {
		h.webhooks.Pod = webhookapi.PodFromRuntime(d.AgentProxy.Runtime, d.AgentProxy.Transport)
	}
	if d.Hydrate != nil {
		r := checkpointreads.API{Hydrate: d.Hydrate, Store: d.Store, Objects: d.Objects, Log: d.Log.Named("checkpoints")}
		if d.AgentProxy != nil {
			r.Runtime = d.AgentProxy.Runtime
		}
		h.reads = checkpointreads.New(r)
		h.git = (&gitserver.Server{Hydrate: d.Hydrate, Objects: d.Objects, Store: d.Store, Auth: s.Auth, Log: d.Log}).WithDefaults()
	}
	if d.AgentProxy != nil {
		h.publish = &publish.API{Runtime: d.AgentProxy.Runtime, Store: d.Store}
	}
	if d.Console != nil {
		o := *d.Console
		o.Store, o.Catalog, o.Auth, o.Log = d.Store, d.Catalog, s.Auth, d.Log.Named("console")
		o.Checkpoints = h.reads
		o.Webhooks, o.Recovery = s.Webhooks, s.Recovery
		if d.AgentProxy != nil {
			o.Runtime, o.Transport = d.AgentProxy.Runtime, d.AgentProxy.Transport
		}
		c, err := console.New(o)
		if err != nil {
			return h, err
		}
		h.console = c
	}
	return h, nil
}
