// Package pairing is the API side of paired machines (spec 4.2, 7.2): a
// user's machine runs `podagent paired --api URL --token svc_pt_…`, which
// dials out to the API, so the machine needs no public address.
//
//	GET /api/pairing/session   (Bearer pairing token) → Session: the project and its pod settings
//	GET /api/pairing/tunnel    (Bearer pairing token) → websocket upgrade
//
// The tunnel is one websocket carrying one HTTP/2 connection on which the API
// is the client and the paired podagent serves its HTTP handler, so requests
// (and their streamed answers) multiplex over one outbound connection. The
// Hub keeps the connected tunnels and is the runtime driver "paired": the
// agent-proxy reaches a paired project at the same URL as any other, and a
// project pinned to a paired machine that is not connected is ErrOffline
// (503 instance_offline). Pairing tokens are issued by
// `apiserver admin pairing create`; only their hashes are stored.
//
// The API runs as several replicas and a tunnel lives on the one its machine
// dialled. That replica records its advertise URL in the project's runtime
// assignment when the tunnel attaches and clears it when the tunnel goes (if
// still its own); any other replica then reaches the machine by relaying the
// agent-proxy request to the holder's
//
//	ANY /internal/projects/{id}/relay/*   (runtime token of the project)
//
// which serves only the holder's own tunnel (Local), so a relayed request is
// never relayed again. A holder that cannot be dialled is ErrOffline.
package pairing

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/auth"
	"github.com/svc-dev/svc/apiserver/internal/runtimes"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/runtimetoken"
	"github.com/svc-dev/svc/shared/wait"
	"github.com/svc-dev/svc/shared/wire"
)

// DriverName is the runtime driver name of paired machines.
const DriverName = store.DriverPaired

// Session is the answer of GET /api/pairing/session: what the paired podagent
// needs to run the project (its SVC_PROJECT_ID, SVC_CLOUD_SYNC_MODE and
// SVC_RUNTIME_TOKEN).
type Session struct {
	ProjectID     string `json:"projectId"`
	CloudSyncMode string `json:"cloudSyncMode"`
	RuntimeToken  string `json:"runtimeToken"`
}

// MaxMessageBytes bounds one websocket message of the tunnel (an HTTP/2 frame
// write is far smaller).
const MaxMessageBytes = 4 << 20

// Options configure a Hub.
type Options struct {
	Store *store.Store
	// RuntimeSecret mints the runtime tokens of paired projects (the session's
	// and the relay's bearer).
	RuntimeSecret []byte
	// AdvertiseURL is this replica's base URL as other replicas reach it
	// (SVC_ADVERTISE_URL); empty: tunnels are not recorded and requests are
	// never relayed (one replica).
	AdvertiseURL string
	// RelayTransport carries relayed requests to other replicas (nil:
	// http.DefaultTransport).
	RelayTransport http.RoundTripper
	Log            *zap.Logger
}

// Hub holds the connected tunnels, one per project (the last machine to
// connect wins), and implements runtimes.Driver for them: a project whose
// tunnel is on another replica is relayed there.
type Hub struct {
	store     *store.Store
	secret    []byte
	log       *zap.Logger
	advertise string
	relayRT   http.RoundTripper

	// pinMu orders recording a tunnel in the store with releasing it, so a
	// departing tunnel cannot clear the record of a newer one on this replica.
	pinMu sync.Mutex

	mu      sync.Mutex
	tunnels map[string]*tunnel
	closed  bool
	wg      sync.WaitGroup
}

type tunnel struct {
	pairingID   string
	projectID   string
	remote      string
	connectedAt time.Time
	cc          *http.ClientConn
	cancel      context.CancelFunc
	done        chan struct{} // closed when the connection is gone
}

func (t *tunnel) gone() bool { return wait.Closed(t.done) }

// NewHub returns a hub.
func NewHub(o Options) *Hub {
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	rt := o.RelayTransport
	if rt == nil {
		rt = http.DefaultTransport
	}
	return &Hub{store: o.Store, secret: o.RuntimeSecret, log: log.Named("pairing"), tunnels: map[string]*tunnel{},
		advertise: strings.TrimSuffix(o.AdvertiseURL, "/"), relayRT: rt}
}

const tokenKey = "svc.pairing"

// authenticate requires a valid, unrevoked pairing token as a bearer.
func (h *Hub) Authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		invalid := wire.Coded("invalid_pairing_token",
			"Invalid pairing token. Pass the token of `apiserver admin pairing create` as 'Authorization: Bearer <token>'.")
		id, secret, ok := ParseToken(auth.Bearer(c.Request().Header.Get("Authorization")))
		if !ok {
			return invalid
		}
		t, err := h.store.GetPairingToken(c.Request().Context(), id)
		if errors.Is(err, store.ErrNotFound) {
			return invalid
		}
		if err != nil {
			return wire.Internal(err)
		}
		if !matches(secret, t.TokenHash) || t.RevokedAt != nil {
			return invalid
		}
		c.Set(tokenKey, t)
		return next(c)
	}
}

func (h *Hub) Session(c echo.Context) error {
	t := c.Get(tokenKey).(store.PairingToken)
	p, err := h.store.GetProject(c.Request().Context(), t.ProjectID)
	if err != nil {
		return wire.Internal(err)
	}
	if len(h.secret) == 0 {
		return wire.Coded("runtime_auth_unconfigured",
			"The API server has no runtime auth secret.")
	}
	return c.JSON(http.StatusOK, Session{ProjectID: p.ID, CloudSyncMode: string(p.CloudSyncMode),
		RuntimeToken: runtimetoken.Mint(h.secret, p.ID)})
}

// tunnel upgrades to a websocket, speaks HTTP/2 over it as the client, and
// keeps the tunnel registered until the connection ends.
func (h *Hub) Tunnel(c echo.Context) error {
	tok := c.Get(tokenKey).(store.PairingToken)
	h.mu.Lock()
	closed := h.closed
	h.mu.Unlock()
	if closed {
		return wire.Coded("shutting_down", "The API server is shutting down.")
	}
	ws, err := websocket.Accept(c.Response(), c.Request(), &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return nil // Accept has answered
	}
	ws.SetReadLimit(MaxMessageBytes)
	ctx, cancel := context.WithCancel(context.WithoutCancel(c.Request().Context()))
	defer cancel()
	wc := &watchedConn{Conn: websocket.NetConn(ctx, ws, websocket.MessageBinary), done: make(chan struct{})}
	defer wc.Close()
	log := h.log.With(zap.String("projectId", tok.ProjectID), zap.String("pairingId", tok.ID),
		zap.String("remote", c.RealIP()))

	cc, err := clientConn(ctx, wc)
	if err != nil {
		log.Warn("tunnel handshake failed", zap.Error(err))
		return nil
	}
	defer cc.Close()
	pctx, pcancel := context.WithTimeout(ctx, 15*time.Second)
	err = probe(pctx, cc) // the paired side serves HTTP/2: the tunnel is usable
	pcancel()
	if err != nil {
		log.Warn("tunnel did not answer its first request", zap.Error(err))
		return nil
	}
	t := &tunnel{pairingID: tok.ID, projectID: tok.ProjectID, remote: c.RealIP(), connectedAt: time.Now(),
		cc: cc, cancel: cancel, done: wc.done}
	if !h.attach(ctx, t, log) {
		return nil
	}
	log.Info("paired machine connected")
	<-wc.done
	h.detach(t)
	log.Info("paired machine disconnected")
	return nil
}

// attach records the machine as the project's runtime, held by this replica,
// and registers its tunnel.
func (h *Hub) attach(ctx context.Context, t *tunnel, log *zap.Logger) bool {
	h.pinMu.Lock()
	defer h.pinMu.Unlock()
	h.mu.Lock()
	closed := h.closed
	h.mu.Unlock()
	if closed {
		return false
	}
	if _, err := h.store.PairMachine(ctx, t.pairingID, h.advertise, t.connectedAt); err != nil {
		log.Warn("pairing the machine failed", zap.Error(err))
		return false
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		h.release(t)
		return false
	}
	old := h.tunnels[t.projectID]
	h.tunnels[t.projectID] = t
	h.wg.Add(1)
	h.mu.Unlock()
	if old != nil {
		h.log.Info("a newer connection replaces the paired machine's tunnel", zap.String("projectId", t.projectID),
			zap.String("old", old.pairingID), zap.String("new", t.pairingID))
		old.cancel()
	}
	return true
}

// detach unregisters the tunnel and, unless another tunnel of the project is
// attached here, clears this replica from the project's assignment.
func (h *Hub) detach(t *tunnel) {
	defer h.wg.Done()
	h.pinMu.Lock()
	defer h.pinMu.Unlock()
	h.mu.Lock()
	cur := h.tunnels[t.projectID]
	if cur == t {
		delete(h.tunnels, t.projectID)
	}
	h.mu.Unlock()
	if cur == nil || cur == t {
		h.release(t)
	}
}

// release clears this replica from the assignment of t's project if it still
// names t's machine here; the caller holds pinMu.
func (h *Hub) release(t *tunnel) {
	if h.advertise == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := h.store.ReleasePairedMachine(ctx, t.projectID, t.pairingID, h.advertise); err != nil {
		h.log.Warn("clearing the tunnel from the runtime assignment failed", zap.String("projectId", t.projectID), zap.Error(err))
	}
}

func (h *Hub) get(projectID string) *tunnel {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t := h.tunnels[projectID]; t != nil && !h.closed && !t.gone() && usable(t.cc) {
		return t
	}
	return nil
}

// Connected reports whether the project's paired machine is connected here.
func (h *Hub) Connected(projectID string) bool { return h.get(projectID) != nil }

// Name implements runtimes.Driver.
func (h *Hub) Name() string { return DriverName }

// Ensure implements runtimes.Driver: the API cannot start a paired machine;
// it is connected (here or on the replica the assignment names) or the
// project is offline.
func (h *Hub) Ensure(ctx context.Context, p store.Project) (runtimes.Endpoint, error) {
	a, err := h.store.GetRuntimeAssignment(ctx, p.ID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && a.Driver != DriverName) {
		return h.ensureLocal(p.ID)
	}
	if err != nil {
		return runtimes.Endpoint{}, err
	}
	return h.EnsurePinned(ctx, p, a)
}

// EnsurePinned implements runtimes.PinnedDriver. The assignment names the
// replica holding the machine's tunnel: this one (or none recorded) → the
// local tunnel; another → a relay to it. A local tunnel of a project whose
// assignment names another replica has been superseded by a newer
// connection there, and is dropped.
func (h *Hub) EnsurePinned(_ context.Context, p store.Project, a store.RuntimeAssignment) (runtimes.Endpoint, error) {
	if a.Endpoint == "" || h.advertise == "" || a.Endpoint == h.advertise {
		return h.ensureLocal(p.ID)
	}
	if t := h.get(p.ID); t != nil {
		h.log.Info("the paired machine connected to another replica; dropping this one's tunnel",
			zap.String("projectId", p.ID), zap.String("holder", a.Endpoint))
		t.cancel()
	}
	if len(h.secret) == 0 {
		return runtimes.Endpoint{}, errNoSecret(p.ID)
	}
	base, err := url.Parse(a.Endpoint)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		h.log.Warn("the runtime assignment names an unusable replica URL", zap.String("projectId", p.ID),
			zap.String("holder", a.Endpoint))
		return runtimes.Endpoint{}, runtimes.ErrOffline
	}
	base.Path = strings.TrimSuffix(base.Path, "/") + internalapi.ProjectPath(p.ID, internalapi.PathRelay)
	base.RawPath, base.RawQuery, base.Fragment = "", "", ""
	return runtimes.Endpoint{URL: base,
		Token: runtimetoken.Mint(h.secret, p.ID), Transport: relayTransport{h.relayRT}}, nil
}

// Running implements runtimes.Finder: the API never starts a paired
// machine, so the endpoint is Ensure's when the machine is connected.
func (h *Hub) Running(ctx context.Context, p store.Project) (runtimes.Endpoint, bool, error) {
	ep, err := h.Ensure(ctx, p)
	if errors.Is(err, runtimes.ErrOffline) {
		return runtimes.Endpoint{}, false, nil
	}
	if err != nil {
		return runtimes.Endpoint{}, false, err
	}
	return ep, true, nil
}

func (h *Hub) ensureLocal(projectID string) (runtimes.Endpoint, error) {
	t := h.get(projectID)
	if t == nil {
		return runtimes.Endpoint{}, runtimes.ErrOffline
	}
	if len(h.secret) == 0 {
		return runtimes.Endpoint{}, errNoSecret(projectID)
	}
	return runtimes.Endpoint{URL: &url.URL{Scheme: "http", Host: tunnelHost},
		Token: runtimetoken.Mint(h.secret, projectID), Transport: tunnelTransport{t}}, nil
}

func errNoSecret(projectID string) error {
	return &runtimes.StartError{ProjectID: projectID, RetryAfter: time.Minute,
		Err: errors.New("SVC_RUNTIME_AUTH_SECRET is not set")}
}

// Local is the driver of the relay route: only the tunnels attached to this
// replica, whatever the assignment says, so a relayed request is never
// relayed again.
func (h *Hub) Local() runtimes.Driver { return localDriver{h} }

type localDriver struct{ h *Hub }

func (d localDriver) Name() string { return DriverName }
func (d localDriver) Ensure(_ context.Context, p store.Project) (runtimes.Endpoint, error) {
	return d.h.ensureLocal(p.ID)
}
func (d localDriver) Stop(ctx context.Context, projectID string) error {
	return d.h.Stop(ctx, projectID)
}
func (d localDriver) Status(ctx context.Context, projectID string) (runtimes.Status, error) {
	return d.h.Status(ctx, projectID)
}

// Stop implements runtimes.Driver: it drops the project's tunnel (the machine
// reconnects if its token is still valid).
func (h *Hub) Stop(_ context.Context, projectID string) error {
	h.mu.Lock()
	t := h.tunnels[projectID]
	delete(h.tunnels, projectID)
	h.mu.Unlock()
	if t != nil {
		t.cancel()
	}
	return nil
}

// Status implements runtimes.Driver.
func (h *Hub) Status(_ context.Context, projectID string) (runtimes.Status, error) {
	t := h.get(projectID)
	if t == nil {
		return runtimes.Status{Driver: DriverName, State: runtimes.StateOffline}, nil
	}
	return runtimes.Status{Driver: DriverName, State: runtimes.StateRunning, Endpoint: "tunnel:" + t.pairingID,
		StartedAt: t.connectedAt}, nil
}

// Close refuses new tunnels, ends every tunnel (each handler detaches its
// own as it returns) and waits for their handlers until ctx ends.
func (h *Hub) Close(ctx context.Context) error {
	h.mu.Lock()
	h.closed = true
	for _, t := range h.tunnels {
		t.cancel() // does not block: the handler's own goroutine ends the tunnel
	}
	h.mu.Unlock()
	return wait.Group(ctx, &h.wg)
}

// tunnelTransport sends a request over one tunnel; a tunnel that is gone is
// runtimes.ErrOffline.
type tunnelTransport struct{ t *tunnel }

func (tt tunnelTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if tt.t.gone() {
		return nil, runtimes.ErrOffline
	}
	res, err := tt.t.cc.RoundTrip(r)
	if err != nil && tt.t.gone() {
		return nil, errors.Join(runtimes.ErrOffline, err)
	}
	return res, err
}

// relayTransport sends a request to the replica holding the tunnel; a
// replica that cannot be dialled (gone, or never reachable) is
// runtimes.ErrOffline. Nothing is retried: the agent-proxy's once-only
// transport sits above this one.
type relayTransport struct{ rt http.RoundTripper }

func (rt relayTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := rt.rt.RoundTrip(r)
	var op *net.OpError
	if err != nil && errors.As(err, &op) && op.Op == "dial" {
		return nil, errors.Join(runtimes.ErrOffline, err)
	}
	return res, err
}

// watchedConn closes done when the connection fails or is closed, so the
// tunnel leaves the hub as soon as its websocket ends.
type watchedConn struct {
	net.Conn
	once sync.Once
	done chan struct{}
}

func (w *watchedConn) Read(p []byte) (int, error) {
	n, err := w.Conn.Read(p)
	if err != nil {
		w.once.Do(func() { close(w.done) })
	}
	return n, err
}

func (w *watchedConn) Close() error {
	w.once.Do(func() { close(w.done) })
	return w.Conn.Close()
}
