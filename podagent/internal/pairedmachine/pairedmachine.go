// Package pairedmachine is the client side of a paired machine (spec 4.2, 7.2):
// `podagent paired --api URL --token svc_pt_…` runs the project's agent on a
// user's machine and serves it to the API through a tunnel the machine dials
// out, so the machine needs no public address and the webhook URL stays the
// same as for a cloud pod.
//
// The pairing token (from `apiserver admin pairing create`) is exchanged at
// GET <api>/api/pairing/session for the project's id, sync mode and runtime
// token, which become the pod's SVC_PROJECT_ID, SVC_CLOUD_SYNC_MODE and
// SVC_RUNTIME_TOKEN; SVC_API_URL is the --api URL. Then the pod serves its
// usual HTTP handler on a Listener whose connections are websockets to
// <api>/api/pairing/tunnel: each carries one HTTP/2 connection (prior
// knowledge) on which the API sends requests. A dropped tunnel is dialled
// again with backoff; a revoked token ends the process.
package pairedmachine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"github.com/sethvargo/go-retry"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/config"
	"github.com/svc-dev/svc/shared/cli"
	"github.com/svc-dev/svc/shared/logging"
	"github.com/svc-dev/svc/shared/settings"
	"github.com/svc-dev/svc/shared/syncmode"
	"github.com/svc-dev/svc/shared/wait"
)

// Session is the answer of GET /api/pairing/session.
type Session struct {
	ProjectID     string `json:"projectId"`
	CloudSyncMode string `json:"cloudSyncMode"`
	RuntimeToken  string `json:"runtimeToken"`
}

// ErrUnauthorized means the API refused the pairing token (unknown or revoked).
var ErrUnauthorized = errors.New("paired: the API refused the pairing token (revoked or unknown)")

// Client talks to the API with a pairing token.
type Client struct {
	// APIURL is the API's base URL (http or https).
	APIURL string
	Token  string
	// HTTP is used for the session call (nil: a client with a 30 s timeout).
	HTTP *http.Client
	Log  *zap.Logger
	// KeepAlive is the interval of websocket pings that detect a dead API
	// (default 20 s).
	KeepAlive time.Duration
}

func (c *Client) log() *zap.Logger {
	if c.Log == nil {
		return zap.NewNop()
	}
	return c.Log
}

// Session fetches the project settings for this machine's pairing token.
func (c *Client) Session(ctx context.Context) (Session, error) {
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(c.APIURL, "/")+"/api/pairing/session", nil)
	if err != nil {
		return Session{}, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	res, err := hc.Do(req)
	if err != nil {
		return Session{}, err
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	switch {
	case res.StatusCode == http.StatusUnauthorized || res.StatusCode == http.StatusForbidden:
		return Session{}, ErrUnauthorized
	case res.StatusCode != http.StatusOK:
		return Session{}, fmt.Errorf("paired: session: %s: %s", res.Status, strings.TrimSpace(string(body)))
	}
	var s Session
	if err := json.Unmarshal(body, &s); err != nil || s.ProjectID == "" || s.RuntimeToken == "" {
		return Session{}, fmt.Errorf("paired: session: unexpected answer %q", string(body))
	}
	return s, nil
}

// Dial opens one tunnel connection: a websocket to /api/pairing/tunnel as a
// net.Conn. The API speaks HTTP/2 on it as the client.
func (c *Client) Dial(ctx context.Context) (net.Conn, error) {
	u, err := url.Parse(strings.TrimSuffix(c.APIURL, "/") + "/api/pairing/tunnel")
	if err != nil {
		return nil, err
	}
	switch u.Scheme {
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ws, res, err := websocket.Dial(dctx, u.String(), &websocket.DialOptions{
		HTTPHeader:      http.Header{"Authorization": {"Bearer " + c.Token}},
		CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		if res != nil && (res.StatusCode == http.StatusUnauthorized || res.StatusCode == http.StatusForbidden) {
			return nil, ErrUnauthorized
		}
		return nil, err
	}
	// The connection lives until it is closed, not as long as ctx.
	cctx, ccancel := context.WithCancel(context.Background())
	conn := &tunnelConn{Conn: websocket.NetConn(cctx, ws, websocket.MessageBinary), cancel: ccancel, done: make(chan struct{})}
	go conn.keepAlive(ws, c.keepAlive(), c.log())
	return conn, nil
}

func (c *Client) keepAlive() time.Duration {
	if c.KeepAlive > 0 {
		return c.KeepAlive
	}
	return 20 * time.Second
}

// tunnelConn is a tunnel as a net.Conn; done is closed when it is closed.
type tunnelConn struct {
	net.Conn
	cancel context.CancelFunc
	once   sync.Once
	done   chan struct{}
}

func (t *tunnelConn) Close() error {
	t.once.Do(func() { close(t.done) })
	err := t.Conn.Close()
	t.cancel()
	return err
}

// keepAlive pings the API; a tunnel whose API stopped answering (a half-open
// connection) is closed so the Listener dials a new one.
func (t *tunnelConn) keepAlive(ws *websocket.Conn, every time.Duration, log *zap.Logger) {
	wait.Ticks(t.done, every, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), every)
		err := ws.Ping(ctx)
		cancel()
		if err != nil && !wait.Closed(t.done) {
			log.Warn("tunnel ping failed; reconnecting", zap.Error(err))
			_ = t.Close()
		}
		return err == nil
	})
}

// Listener is a net.Listener over the tunnel: Accept returns a connection
// once the previous one has ended (one tunnel at a time), dialling with
// backoff. It dials nothing before the first Accept, so the pod connects
// only when its server is about to serve.
type Listener struct {
	Client *Client
	// MinBackoff and MaxBackoff bound redial waits (defaults 250 ms, 30 s).
	MinBackoff, MaxBackoff time.Duration

	once    sync.Once
	ctx     context.Context
	cancel  context.CancelFunc
	mu      sync.Mutex
	current *tunnelConn
}

func (l *Listener) init() {
	l.once.Do(func() { l.ctx, l.cancel = context.WithCancel(context.Background()) })
}

// Accept implements net.Listener.
func (l *Listener) Accept() (net.Conn, error) {
	l.init()
	l.mu.Lock()
	prev := l.current
	l.mu.Unlock()
	if prev != nil {
		select {
		case <-prev.done:
		case <-l.ctx.Done():
			return nil, net.ErrClosed
		}
	}
	minB := settings.PositiveOr(l.MinBackoff, 250*time.Millisecond)
	maxB := settings.PositiveOr(l.MaxBackoff, 30*time.Second)
	var tc *tunnelConn
	var last error
	err := retry.Do(l.ctx, logged(retry.WithCappedDuration(maxB, retry.WithJitterPercent(50, retry.NewExponential(minB))),
		func(d time.Duration) {
			l.Client.log().Warn("tunnel dial failed; retrying", zap.Duration("in", d), zap.Error(last))
		}), func(ctx context.Context) error {
		conn, err := l.Client.Dial(ctx)
		switch {
		case err == nil:
			tc = conn.(*tunnelConn)
			return nil
		case errors.Is(err, ErrUnauthorized):
			return err
		}
		last = err
		return retry.RetryableError(err)
	})
	switch {
	case err == nil:
		l.mu.Lock()
		l.current = tc
		l.mu.Unlock()
		l.Client.log().Info("tunnel connected", zap.String("api", l.Client.APIURL))
		return tc, nil
	case l.ctx.Err() != nil:
		return nil, net.ErrClosed
	}
	return nil, err
}

// logged is next, calling log with each wait it gives: the pairing loops
// retry the one way the service retries (go-retry) and still say when
// they try again.
func logged(next retry.Backoff, log func(time.Duration)) retry.Backoff {
	return retry.BackoffFunc(func() (time.Duration, bool) {
		d, stop := next.Next()
		if !stop {
			log(d)
		}
		return d, stop
	})
}

// Close stops dialling; the current tunnel stays open until the server that
// serves it closes it (after draining, on graceful shutdown).
func (l *Listener) Close() error {
	l.init()
	l.cancel()
	return nil
}

// Addr implements net.Listener.
func (l *Listener) Addr() net.Addr { return tunnelAddr(l.Client.APIURL) }

// Protocols are what an http.Server must speak on this listener: HTTP/2 with
// prior knowledge (the API is an HTTP/2 client on the tunnel).
func (l *Listener) Protocols() *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &p
}

type tunnelAddr string

func (a tunnelAddr) Network() string { return "tunnel" }
func (a tunnelAddr) String() string  { return string(a) }

// Serve runs a pod with cfg and log, serving on ln (the podagent's serve).
type Serve func(cfg *config.Config, log *zap.Logger, ln net.Listener) error

// Main is `podagent paired --api URL --token TOKEN [pod flags]`. Its own
// options (pairedOptions: the URL, also SVC_API_URL; the token, also
// SVC_PAIRING_TOKEN or SVC_PAIRING_TOKEN_FILE; --log-level and --log-format,
// also SVC_LOG_LEVEL and SVC_LOG_FORMAT) are read first, since the logger is
// needed before the session; other settings (storage, data and workspace
// dirs, …) are the pod's usual flags and SVC_* environment.
func Main(args []string, serve Serve) int {
	var rest []string
	var foreign []settings.Foreign
	c, log, ok := cli.Start("podagent paired", func() (c pairedConfig, err error) {
		foreign, err = config.CheckEnviron(os.Environ(), settings.EnvNames(pairedOptions())...)
		if err != nil {
			return c, err
		}
		c, rest, err = parseArgs(args, os.Getenv)
		return c, err
	}, func(c pairedConfig) logging.Options { return c.Log })
	if !ok {
		return cli.ExitUsage
	}
	defer log.Sync()
	log = log.Named("podagent")
	client := &Client{APIURL: c.API, Token: c.Token, Log: log.Named("paired")}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	sess, err := sessionWithRetry(ctx, client, time.Minute)
	stop()
	if err != nil {
		log.Error("pairing session failed", zap.Error(err))
		return 1
	}
	overrides := map[string]string{
		"SVC_PROJECT_ID":    sess.ProjectID,
		syncmode.EnvVar:     sess.CloudSyncMode,
		"SVC_RUNTIME_TOKEN": sess.RuntimeToken,
		"SVC_API_URL":       c.API,
		// The pod logs with this logger; its table reads the same words.
		"SVC_LOG_LEVEL":  c.Log.Level,
		"SVC_LOG_FORMAT": c.Log.Format,
	}
	cfg, err := config.Parse("podagent paired", rest, func(k string) string {
		if v, ok := overrides[k]; ok {
			return v
		}
		return os.Getenv(k)
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "podagent paired:", err)
		return 2
	}
	cfg.Foreign = foreign
	log.Info("paired machine serving project", zap.String("projectId", sess.ProjectID), zap.String("api", c.API))
	if err := serve(cfg, log, &Listener{Client: client}); err != nil {
		log.Error("podagent failed", zap.Error(err))
		return 1
	}
	return 0
}

// sessionWithRetry retries transient failures for up to limit (250 ms
// doubling to 5 s, with jitter); a refused token fails at once.
func sessionWithRetry(ctx context.Context, c *Client, limit time.Duration) (Session, error) {
	var last error
	b := logged(retry.WithMaxDuration(limit, retry.WithCappedDuration(5*time.Second,
		retry.WithJitterPercent(20, retry.NewExponential(250*time.Millisecond)))), func(d time.Duration) {
		c.log().Warn("pairing session failed; retrying", zap.Duration("in", d), zap.Error(last))
	})
	return retry.DoValue(ctx, b, func(ctx context.Context) (Session, error) {
		s, err := c.Session(ctx)
		if err == nil || errors.Is(err, ErrUnauthorized) {
			return s, err
		}
		last = err
		return s, retry.RetryableError(err)
	})
}

// splitArgs separates --name value / --name=value flags of names from the rest.
func splitArgs(args []string, names ...string) (own, rest []string) {
	is := func(a string) (string, bool) {
		a = strings.TrimLeft(a, "-")
		name, _, _ := strings.Cut(a, "=")
		for _, n := range names {
			if name == n {
				return n, true
			}
		}
		return "", false
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if _, ok := is(a); ok && strings.HasPrefix(a, "-") {
			own = append(own, a)
			if !strings.Contains(a, "=") && i+1 < len(args) {
				own = append(own, args[i+1])
				i++
			}
			continue
		}
		rest = append(rest, a)
	}
	return own, rest
}

// pairedConfig is what paired mode reads before it has a session: the API
// to dial, the pairing token and the logger's settings.
type pairedConfig struct {
	API, Token string
	Log        logging.Options
}

// pairedOptions is paired mode's own option table; every other flag and
// SVC_* variable is the pod's (config.Parse, once the session is known).
func pairedOptions() []settings.Option[pairedConfig] {
	return append([]settings.Option[pairedConfig]{
		{Flag: "api", Env: "SVC_API_URL", Usage: "API base URL the machine dials", Set: settings.String(func(c *pairedConfig) *string { return &c.API })},
		{Flag: "token", Env: "SVC_PAIRING_TOKEN", Secret: true, Usage: "pairing token of `apiserver admin pairing create`", Set: settings.String(func(c *pairedConfig) *string { return &c.Token })},
	}, settings.LogOptions(func(c *pairedConfig) *logging.Options { return &c.Log })...)
}

// parseArgs reads paired mode's options from args and getenv and returns
// the pod's flags apart.
func parseArgs(args []string, getenv func(string) string) (pairedConfig, []string, error) {
	opts := pairedOptions()
	names := make([]string, len(opts))
	for i, o := range opts {
		names[i] = o.Flag
	}
	own, rest := splitArgs(args, names...)
	var c pairedConfig
	if _, err := settings.Parse(&c, "podagent paired", own, getenv, opts); err != nil {
		return c, nil, err
	}
	if c.API == "" || c.Token == "" {
		return c, nil, errors.New("--api and --token are required")
	}
	return c, rest, nil
}

// Help lists paired mode's own settings with their flags, variables and
// defaults (`podagent help paired`; the pod's settings follow them).
func Help() string { return settings.Help(pairedOptions()) }
