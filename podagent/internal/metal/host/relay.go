package host

import (
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/callback"
	"github.com/svc-dev/svc/podagent/internal/metal/guest"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/runtimetoken"
)

// relay is the guest's only way out: a loopback HTTP proxy that QEMU's
// guestfwd reaches (one `metalhost pipe` per connection) and that forwards
// the project's own /internal routes (checkpoint records, the model
// gateway) to the API, and nothing else — never
// object storage.
//
// It also serves guest.CallbackForwardPath with callbacks (the host's
// callback.Forwarder: async webhook callbacks leave the guest there, under
// the host's SSRF guard), and the project's large-file batch route and
// LFSTransferPath (large files from the host's store, lfsrelay.go).
type relay struct {
	ln  net.Listener
	srv *http.Server
}

type relayConfig struct {
	apiURL, projectID string
	// token is the project's runtime token: the callback forwarder serves
	// only a caller that presents it (callback.HeaderForwardToken).
	token     string
	callbacks http.Handler
	// lfs, when set, answers the large-file batch and moves the bytes.
	lfs *lfsTransfer
}

func newRelay(c relayConfig, log *zap.Logger) (*relay, error) {
	if c.apiURL == "" {
		return nil, errors.New("metal host: the API URL is not set (the guest's relay needs it)")
	}
	target, err := url.Parse(c.apiURL)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	prefix := internalapi.ProjectURL("", c.projectID, "/")
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
		},
		FlushInterval: -1, // stream model responses as they come
	}
	rl := &relay{ln: ln, srv: &http.Server{ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.URL.Path == guest.CallbackForwardPath && c.callbacks != nil:
				if !runtimetoken.Equal(c.token, r.Header.Get(callback.HeaderForwardToken)) {
					hostError(w, r, "invalid_runtime_token", "the callback forwarder needs the project's runtime token")
					return
				}
				c.callbacks.ServeHTTP(w, r)
			case strings.HasPrefix(r.URL.Path, LFSTransferPath) && c.lfs != nil:
				c.lfs.ServeHTTP(w, r)
			case c.lfs != nil && isLFSBatch(r.URL.Path, c.projectID):
				c.lfs.batch(w, r, "http://"+r.Host)
			case !strings.HasPrefix(r.URL.Path, prefix) || strings.Contains(r.URL.Path, ".."):
				log.Warn("guest relay refused a request", zap.String("projectId", c.projectID), zap.String("path", r.URL.Path))
				hostError(w, r, "forbidden", "the guest may only call its project's internal routes")
			default:
				proxy.ServeHTTP(w, r)
			}
		})}}
	go func() { _ = rl.srv.Serve(ln) }()
	return rl, nil
}

func (r *relay) addr() string { return r.ln.Addr().String() }

func (r *relay) close() { _ = r.srv.Close() }
