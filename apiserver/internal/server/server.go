// Package server assembles the API server's HTTP surface (docs/design.md §5, HTTP
// surfaces): the public API under /api/v1 and /v1 (spec 4.1), the /internal
// routes pods call with their runtime token (spec 4.3, 5.3), and /healthz,
// /readyz, /metrics. Handlers live in their own packages; this one only wires.
package server

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/agentproxy"
	"github.com/svc-dev/svc/apiserver/internal/apierr"
	"github.com/svc-dev/svc/apiserver/internal/auth"
	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/console"
	"github.com/svc-dev/svc/apiserver/internal/gateway"
	"github.com/svc-dev/svc/apiserver/internal/hydrate"
	"github.com/svc-dev/svc/apiserver/internal/metering"
	"github.com/svc-dev/svc/apiserver/internal/outbox"
	"github.com/svc-dev/svc/apiserver/internal/pairing"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/tracing"
	"github.com/svc-dev/svc/apiserver/internal/upstream"
	"github.com/svc-dev/svc/apiserver/internal/webhooklog"
	"github.com/svc-dev/svc/apiserver/internal/webhookqueue"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/webhooksend"
	"github.com/svc-dev/svc/shared/wire"
)

// Deps are what the server is built from.
type Deps struct {
	Store    *store.Store
	Catalog  *catalog.Catalog
	Upstream *upstream.Client
	// Routing tunes fallbacks, retries, breakers and key pools (its
	// Registerer, Tracer and Log are filled in here).
	Routing upstream.RouterOptions
	// Tracer records spans; nil: tracing off.
	Tracer        *tracing.Tracer
	Log           *zap.Logger
	RuntimeSecret []byte
	MaxBodyBytes  int64
	// Hydrate serves checkpoint reads and smart-HTTP git (nil: not mounted).
	Hydrate *hydrate.Manager
	// ObjectsHandler serves the fs object store's presigned URLs at
	// storage.FSBasePath (nil for s3).
	ObjectsHandler http.Handler
	// Objects is the object store (spec 2.7); the LFS batch endpoint signs
	// URLs of <projectId>/lfs/objects/<oid> with it (nil: not mounted).
	Objects objstore.Store
	// AgentProxy serves /api/projects/{id}/agent-proxy/* behind cloud auth
	// (nil: not mounted).
	AgentProxy *agentproxy.Proxy
	// Pairing serves /api/pairing/* for paired machines (nil: not mounted).
	Pairing *pairing.Hub
	// Relay serves /internal/projects/{id}/relay/* for the other replicas:
	// agent-proxy requests of a paired project whose tunnel is on this
	// replica (an agentproxy.Proxy with Relay set over Pairing.Local(); nil:
	// not mounted).
	Relay *agentproxy.Proxy
	// AnswerDeadline: an accepted async message neither answered nor
	// delivered by then is served by the outbox as unanswered (0: the
	// outbox default).
	AnswerDeadline time.Duration
	// WebhookFailingAfter: a callback endpoint every attempt to which
	// failed for this long is marked failing (0: the webhooklog default).
	WebhookFailingAfter time.Duration
	// WebhookQueue configures the API's callback delivery queue (the zero
	// value: its defaults); CallbackAllowed are the networks its SSRF guard
	// lets through (SVC_CALLBACK_ALLOWED_NETS); WebhookMaxInFlight and
	// WebhookRate the per-endpoint throttle (0: defaults).
	WebhookQueue       webhookqueue.Options
	CallbackAllowed    []netip.Prefix
	WebhookMaxInFlight int
	WebhookRate        float64
	// StorageErr reports object storage (storage.Health.Err; nil: no
	// check): /readyz detail and svc_object_storage_up.
	StorageErr func() error
	// Console mounts the web console and the JSON key API with these
	// options (nil: not mounted). The server fills in its own
	// store, catalog, authenticator, checkpoint reads and runtime.
	Console *console.Options
	// OutageServeFor: while the database is down, known keys, plans,
	// usage windows and key budgets are served from what this replica
	// read within this long (0: fail closed, 503); docs/gateway.md.
	OutageServeFor time.Duration
	// PerRequestKeyBudget: key budgets reserve every request in the
	// database instead of leasing blocks per replica (docs/gateway.md).
	PerRequestKeyBudget bool
	// UsageSpoolDir holds the usage spool file, where records the
	// database refuses wait past the memory spool ("": memory only).
	UsageSpoolDir string
	// Timeouts of the HTTP server (HTTPServer) and of the answers of the
	// non-streaming routes; zero fields take DefaultTimeouts'.
	Timeouts Timeouts
}

// Timeouts are the HTTP server's (docs/gateway.md, Client connections).
type Timeouts struct {
	// ReadHeader: a client must send a request's headers within this long
	// of the connection's first byte (a new or handed-back connection).
	ReadHeader time.Duration
	// Idle: a kept-alive connection with no request for this long is
	// closed.
	Idle time.Duration
	// Write bounds the writing of a non-streamed answer of the public API,
	// the probes and the console, from its headers on (httpmw.WriteTimeout);
	// streams get none.
	Write time.Duration
}

// DefaultTimeouts are the defaults of SVC_HTTP_*_TIMEOUT.
var DefaultTimeouts = Timeouts{ReadHeader: 10 * time.Second, Idle: 120 * time.Second, Write: 60 * time.Second}

func (t Timeouts) orDefault() Timeouts {
	if t.ReadHeader <= 0 {
		t.ReadHeader = DefaultTimeouts.ReadHeader
	}
	if t.Idle <= 0 {
		t.Idle = DefaultTimeouts.Idle
	}
	if t.Write <= 0 {
		t.Write = DefaultTimeouts.Write
	}
	return t
}

// HTTPServer is the http.Server to serve s with: read-header and idle
// timeouts set, no ReadTimeout (git pushes and large-file uploads take
// long; the public API bounds its bodies by size) and no WriteTimeout
// (it would cut streams, git fetches and downloads: the non-streaming
// routes set a write deadline of their own when they answer).
func (s *Server) HTTPServer() *http.Server {
	t := s.deps.Timeouts
	return &http.Server{Handler: s.Echo, ReadHeaderTimeout: t.ReadHeader, IdleTimeout: t.Idle}
}

// Server is the assembled HTTP server.
type Server struct {
	Echo     *echo.Echo
	Auth     *auth.Authenticator
	Registry *prometheus.Registry
	Usage    *metering.Recorder
	// Outbox is the durable webhook outbox (the pod's POST and the
	// integrations' long-poll).
	Outbox *outbox.Outbox
	// Webhooks is the webhook attempt log, replay and endpoint health,
	// shared by the routes and the console.
	Webhooks *webhooklog.Log
	// Queue is the API's callback delivery queue (run it with Queue.Run on
	// every replica); Throttle its per-endpoint throttle, shared by replays.
	Queue    *webhookqueue.Queue
	Throttle *webhookqueue.Throttle
	// Recovery replays a channel's range of messages (same sender and
	// throttle as the queue).
	Recovery *webhookqueue.Recovery
	// Console is the web console (nil when Deps.Console is nil).
	Console *console.Console
	// Streams are the streamed completions relayed past their handler
	// (taken-over HTTP/1.1 connections): http.Server.Shutdown does not wait
	// for them, Streams.Shutdown does.
	Streams *gateway.Streams
	deps    Deps
	h       handlers
	// dbDownSince: unix nanoseconds of the first failed readiness ping of
	// the current database outage (0: none).
	dbDownSince atomic.Int64
}

// New builds every handler once (handlers.go) and mounts them (routes.go).
func New(d Deps) *Server {
	d.Timeouts = d.Timeouts.orDefault()
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = apierr.Handler(d.Log)
	e.Use(middleware.RequestIDWithConfig(middleware.RequestIDConfig{Generator: requestID}))
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{
		LogErrorFunc: func(c echo.Context, err error, stack []byte) error {
			d.Log.Error("panic in handler", zap.Error(err), zap.ByteString("stack", stack))
			return err
		},
	}))

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if d.StorageErr != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "svc_object_storage_up",
			Help: "1 while object storage answers the API server's bucket check, 0 while it does not"}, func() float64 {
			if d.StorageErr() != nil {
				return 0
			}
			return 1
		}))
	}
	a := auth.New(d.Store, d.RuntimeSecret, d.Log.Named("auth"))
	a.StaleFor = d.OutageServeFor
	s := &Server{Echo: e, Auth: a, Registry: reg, deps: d, Outbox: outbox.New(d.Store, d.Log.Named("outbox")),
		Streams: &gateway.Streams{IdleTimeout: d.Timeouts.Idle, HeaderTimeout: d.Timeouts.ReadHeader}}
	s.Outbox.AnswerDeadline = d.AnswerDeadline
	s.Webhooks = webhooklog.New(d.Store, d.Log.Named("webhooklog"), reg)
	s.Webhooks.FailingAfter = d.WebhookFailingAfter
	s.Throttle = webhookqueue.NewThrottle(d.WebhookMaxInFlight, d.WebhookRate)
	sender := webhooksend.NewSender(webhooksend.NewGuard(d.CallbackAllowed), nil, d.WebhookQueue.AttemptTimeout, nil)
	s.Queue = webhookqueue.New(d.Store, sender, s.Throttle, s.Webhooks, d.WebhookQueue, d.Log.Named("webhookqueue"), reg)
	s.Outbox.QueueDelay = s.Queue.FirstDelay
	s.Recovery = webhookqueue.NewRecovery(d.Store, sender, s.Throttle, s.Webhooks, d.Log.Named("webhookqueue"))
	if d.AgentProxy != nil && d.AgentProxy.Accepted == nil {
		d.AgentProxy.Accepted = s.Outbox.RecordAccepted
	}
	if d.AgentProxy != nil && d.AgentProxy.Pending == nil {
		d.AgentProxy.Pending = s.Outbox.Pending
	}

	s.Usage = metering.NewRecorder(d.Store, d.Log.Named("metering"), metering.RecorderOptions{SpoolDir: d.UsageSpoolDir})
	h, err := s.buildHandlers(d)
	if err != nil {
		panic(err) // the console's templates are embedded: only a broken build fails here
	}
	s.h, s.Console = h, h.console
	s.routes(e)
	return s
}

// Close writes the usage records still queued and waits for the keys'
// last-use writes; call it after the HTTP server has stopped taking requests.
func (s *Server) Close(ctx context.Context) error {
	var leases error
	if s.h.api != nil && s.h.api.Meter != nil {
		leases = s.h.api.Meter.ReturnLeases(ctx) // unused budget leases go back
	}
	return errors.Join(leases, s.Usage.Close(ctx), s.Auth.Close(ctx))
}

func (s *Server) ready(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2e9)
	defer cancel()
	if err := s.deps.Store.Ping(ctx); err != nil {
		// Serving through a database outage (docs/gateway.md): the replica
		// stays ready — a readiness probe failing on every replica at once
		// would take the whole gateway out — for as long as it serves what
		// it knows, then reports the outage.
		now := time.Now()
		s.dbDownSince.CompareAndSwap(0, now.UnixNano())
		since := time.Unix(0, s.dbDownSince.Load())
		if serveFor := s.deps.OutageServeFor; serveFor > 0 && now.Sub(since) < serveFor {
			return c.JSON(http.StatusOK, map[string]string{"status": "degraded", "database": "unavailable",
				"databaseDownSince": since.UTC().Format(time.RFC3339)})
		}
		return wire.Coded("database_unavailable", "Database is not reachable.")
	}
	s.dbDownSince.Store(0)
	// Ready without object storage: the public API and the outbox need
	// none; what does (reads, LFS, publish) answers 503 on its own.
	storage := "ok"
	if s.deps.StorageErr != nil && s.deps.StorageErr() != nil {
		storage = "unavailable"
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ready", "database": "ok", "storage": storage})
}
