// Package gitserver is the smart-HTTP git backend of spec 4.3 at
// /api/projects/:id/git/*, for an external machine's clone, fetch and pull
// (protocol v0, v1 and v2, shallow included) and for push-back:
//
//	GET  …/git/info/refs?service=git-upload-pack|git-receive-pack
//	POST …/git/git-upload-pack
//	POST …/git/git-receive-pack
//
// Each request refreshes the project's hydrated copy (internal/hydrate) and
// runs `git upload-pack --stateless-rpc` or `git receive-pack
// --stateless-rpc` on it through gitrun, with the client's Git-Protocol
// header passed as GIT_PROTOCOL and gzip request bodies decompressed.
//
// Receive-pack is accepted only while the project's row (read at the
// request) says dual_shadow and only from the project's pod (its runtime
// token): the API is then the pod's origin and keeps what
// it receives durable — it writes <projectId>/repo.git.tar.gz itself,
// fenced with conditional PUTs, and its post-receive writes one
// ProjectCheckpoint row per pushed commit (durable.go; docs/sync-modes.md
// §2). Any other push-back is refused with a protocol ERR line the client
// prints ("remote error: push-back is refused …"): in git_only the pod owns
// the history and would drop it (§3); the pod's own push in git_only or s3
// is refused likewise and writes nothing.
//
// Authentication: HTTP Basic with the svc_sk_ API key as password (any
// user name) or a Bearer key; a missing or bad key is 401 with
// WWW-Authenticate so git clients ask their credential helper; the key's
// user must be a member of the project's workspace (403 otherwise). The
// project's runtime token (svc_rt_…) is accepted too, for its pod.
package gitserver

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/auth"
	"github.com/svc-dev/svc/apiserver/internal/httpmw"
	"github.com/svc-dev/svc/apiserver/internal/hydrate"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/gitrun"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/runtimetoken"
	"github.com/svc-dev/svc/shared/settings"
	"github.com/svc-dev/svc/shared/wire"
)

// Defaults of Server.
const (
	DefaultTimeout         = 30 * time.Minute
	DefaultMaxUploadBody   = 64 << 20
	DefaultMaxReceiveBytes = 2 << 30
	// SourceReceivePack is store.SourceReceivePack.
	SourceReceivePack = store.SourceReceivePack
)

// Recorder stores the push-back row (*store.Store implements it).
type Recorder interface {
	RecordCheckpoint(ctx context.Context, projectID string, rec wire.CheckpointRecord, source string) (string, bool, error)
}

// Server holds the handlers' dependencies.
type Server struct {
	Hydrate *hydrate.Manager
	// Objects is where dual_shadow pushes are made durable (the store the
	// hydrate manager reads).
	Objects  objstore.Store
	Runner   *gitrun.Runner
	Store    *store.Store
	Recorder Recorder // defaults to Store
	Auth     *auth.Authenticator
	Log      *zap.Logger
	// Timeout bounds one git process (default DefaultTimeout).
	Timeout time.Duration
	// MaxUploadBody and MaxReceiveBytes bound request bodies after
	// decompression.
	MaxUploadBody   int64
	MaxReceiveBytes int64
}

// WithDefaults fills the zero options and returns s; the server's route
// table mounts InfoRefs, UploadPack and ReceivePack behind Authenticate and
// ProjectMember.
func (s *Server) WithDefaults() *Server {
	if s.Log == nil {
		s.Log = zap.NewNop()
	}
	s.Log = s.Log.Named("gitserver")
	if s.Recorder == nil {
		s.Recorder = s.Store
	}
	s.Timeout = settings.PositiveOr(s.Timeout, DefaultTimeout)
	if s.MaxUploadBody <= 0 {
		s.MaxUploadBody = DefaultMaxUploadBody
	}
	s.MaxReceiveBytes = settings.PositiveOr(s.MaxReceiveBytes, DefaultMaxReceiveBytes)
	return s
}

// MemberOrPod is the authorisation after Authenticate: the project's own
// pod (its runtime token, for which Authenticate already set the project)
// passes; anyone else must pass member (ProjectMember on "id").
func MemberOrPod(member echo.MiddlewareFunc) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		viaMember := member(next)
		return func(c echo.Context) error {
			if httpmw.PrincipalFrom(c).Runtime() {
				return next(c)
			}
			return viaMember(c)
		}
	}
}

// UploadPack is POST …/git/git-upload-pack (clone and fetch).
func (s *Server) UploadPack(c echo.Context) error { return s.rpc(c, "upload-pack") }

// ReceivePack is POST …/git/git-receive-pack (push-back).
func (s *Server) ReceivePack(c echo.Context) error { return s.rpc(c, "receive-pack") }

// wwwAuthenticate makes git clients retry with credentials.
const wwwAuthenticate = `Basic realm="svc git", charset="UTF-8"`

// authenticate accepts the API key as HTTP Basic password or as a bearer.
func (s *Server) Authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		key := credential(c.Request().Header.Get("Authorization"))
		unauthorized := func() error {
			e := wire.InvalidAPIKey()
			e.Message = "Invalid or missing API key. Use HTTP Basic auth with the svc_sk_ key as password (any user name), or 'Authorization: Bearer <key>'."
			e.Headers = map[string]string{"WWW-Authenticate": wwwAuthenticate}
			return e
		}
		if key == "" {
			return unauthorized()
		}
		if strings.HasPrefix(key, runtimetoken.Prefix) {
			p, err := s.Auth.Runtime(c.Request().Context(), key, c.Param("id"))
			if err != nil {
				var ae *wire.Error
				if errors.As(err, &ae) && ae.Status == http.StatusUnauthorized {
					return unauthorized()
				}
				return err
			}
			proj, err := s.Store.GetProject(c.Request().Context(), p.ProjectID)
			if err != nil {
				return wire.Unavailable(err)
			}
			httpmw.SetPrincipal(c, p)
			httpmw.SetProject(c, proj)
			return next(c)
		}
		p, err := s.Auth.APIKey(c.Request().Context(), key)
		if err != nil {
			var ae *wire.Error
			if errors.As(err, &ae) && ae.Status == http.StatusUnauthorized {
				return unauthorized()
			}
			return err
		}
		httpmw.SetPrincipal(c, p)
		return next(c)
	}
}

// credential extracts the key of a Basic (password) or Bearer header.
func credential(h string) string {
	if k := auth.Bearer(h); k != "" {
		return k
	}
	const p = "Basic "
	if len(h) <= len(p) || !strings.EqualFold(h[:len(p)], p) {
		return ""
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(h[len(p):]))
	if err != nil {
		return ""
	}
	_, pass, ok := strings.Cut(string(b), ":")
	if !ok {
		return ""
	}
	return pass
}

var gitProtocolRE = regexp.MustCompile(`^[A-Za-z0-9=:._-]{1,256}$`)

// gitProtocol returns the GIT_PROTOCOL value of the request ("" if none or
// malformed) and whether it asks for protocol v2.
func gitProtocol(r *http.Request) (string, bool) {
	v := r.Header.Get("Git-Protocol")
	if !gitProtocolRE.MatchString(v) {
		return "", false
	}
	v2 := false
	for _, kv := range strings.Split(v, ":") {
		if kv == "version=2" {
			v2 = true
		}
	}
	return v, v2
}

func serviceName(q string) (string, bool) {
	switch q {
	case "git-upload-pack":
		return "upload-pack", true
	case "git-receive-pack":
		return "receive-pack", true
	}
	return "", false
}

func noCache(h http.Header) {
	h.Set("Expires", "Fri, 01 Jan 1980 00:00:00 GMT")
	h.Set("Pragma", "no-cache")
	h.Set("Cache-Control", "no-cache, max-age=0, must-revalidate")
}

// pktLine encodes one pkt-line.
func pktLine(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }

func (s *Server) command(r *hydrate.Repo, service string, env string) *gitrun.Cmd {
	var cmd *gitrun.Cmd
	if service == "receive-pack" {
		cmd = r.Git("-c", "receive.fsckObjects=true", "-c", "core.hooksPath=/dev/null", "receive-pack", "--stateless-rpc")
	} else {
		cmd = r.Git("-c", "core.hooksPath=/dev/null", "upload-pack", "--stateless-rpc", "--strict")
	}
	cmd.Timeout(s.Timeout)
	if env != "" {
		cmd.Env("GIT_PROTOCOL=" + env)
	}
	return cmd
}

func (s *Server) InfoRefs(c echo.Context) error {
	service, ok := serviceName(c.QueryParam("service"))
	if !ok {
		return wire.Coded("invalid_service",
			"Only the smart HTTP protocol is served: ?service=git-upload-pack or ?service=git-receive-pack.")
	}
	proj := httpmw.ProjectFrom(c)
	proto, v2 := gitProtocol(c.Request())
	var out bytes.Buffer
	if !v2 || service == "receive-pack" {
		out.WriteString(pktLine("# service=git-" + service + "\n"))
		out.WriteString("0000")
	}
	h := c.Response().Header()
	if service == "receive-pack" {
		if err := s.notOwner(c, proj.ID); err != nil {
			return err
		}
		if msg := s.pushRefusal(c, proj); msg != "" {
			out.WriteString(pktLine("ERR " + msg))
			noCache(h)
			return c.Blob(http.StatusOK, "application/x-git-receive-pack-advertisement", out.Bytes())
		}
	}
	r, err := s.Hydrate.Acquire(c.Request().Context(), proj.ID)
	if errors.Is(err, hydrate.ErrNotFound) && (proj.CloudSyncMode.AcceptsPodPush() || httpmw.PrincipalFrom(c).Runtime()) {
		// The pod's origin before its first push: an empty repository.
		dir, cleanup, eerr := s.emptyRepo(c.Request().Context())
		if eerr != nil {
			return wire.Internal(eerr)
		}
		defer cleanup()
		if err := s.commandAt(dir, service, proto).AddArgs("--advertise-refs").AddDynamic(dir).
			Stdout(&out).Run(c.Request().Context()); err != nil {
			return wire.Internal(err)
		}
		noCache(h)
		return c.Blob(http.StatusOK, "application/x-git-"+service+"-advertisement", out.Bytes())
	}
	if err != nil {
		return hydrate.APIError(err)
	}
	defer r.Release()
	if err := s.command(r, service, proto).AddArgs("--advertise-refs").AddDynamic(r.GitDir).
		Stdout(&out).Run(c.Request().Context()); err != nil {
		return wire.Internal(err)
	}
	hydrate.SetHeaders(h, r)
	noCache(h)
	return c.Blob(http.StatusOK, "application/x-git-"+service+"-advertisement", out.Bytes())
}

// lazyWriter commits the response on the first byte, so a git that fails
// before writing anything still gets a proper error status.
type lazyWriter struct {
	c       echo.Context
	service string
	started bool
}

func (w *lazyWriter) Write(p []byte) (int, error) {
	if !w.started {
		w.started = true
		h := w.c.Response().Header()
		h.Set(echo.HeaderContentType, "application/x-git-"+w.service+"-result")
		noCache(h)
		w.c.Response().WriteHeader(http.StatusOK)
	}
	n, err := w.c.Response().Write(p)
	if err == nil {
		w.c.Response().Flush()
	}
	return n, err
}

func (s *Server) rpc(c echo.Context, service string) error {
	req := c.Request()
	if ct := req.Header.Get(echo.HeaderContentType); ct != "application/x-git-"+service+"-request" {
		return wire.Coded("unsupported_media_type",
			"Content-Type must be application/x-git-"+service+"-request.")
	}
	limit := s.MaxUploadBody
	if service == "receive-pack" {
		limit = s.MaxReceiveBytes
	}
	var body io.Reader = req.Body
	switch strings.ToLower(req.Header.Get("Content-Encoding")) {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			return wire.Coded("invalid_body", "The request body is not valid gzip.")
		}
		defer zr.Close()
		body = zr
	default:
		return wire.Coded("invalid_content_encoding",
			"Content-Encoding must be gzip or absent.")
	}
	lr := &limitReader{r: body, n: limit}

	proj := httpmw.ProjectFrom(c)
	proto, _ := gitProtocol(req)
	if service == "receive-pack" {
		if err := s.notOwner(c, proj.ID); err != nil {
			return err
		}
		if msg := s.pushRefusal(c, proj); msg != "" {
			return wire.Coded("push_refused", msg)
		}
		return s.durableReceive(c, proj, lr, proto)
	}
	r, err := s.Hydrate.Acquire(req.Context(), proj.ID)
	if errors.Is(err, hydrate.ErrNotFound) && (proj.CloudSyncMode.AcceptsPodPush() || httpmw.PrincipalFrom(c).Runtime()) {
		dir, cleanup, eerr := s.emptyRepo(req.Context())
		if eerr != nil {
			return wire.Internal(eerr)
		}
		defer cleanup()
		w := &lazyWriter{c: c, service: service}
		if err := s.commandAt(dir, service, proto).AddDynamic(dir).Stdin(lr).Stdout(w).Run(req.Context()); err != nil && !w.started {
			return wire.Internal(err)
		}
		if !w.started {
			w.Write(nil)
		}
		return nil
	}
	if err != nil {
		return hydrate.APIError(err)
	}
	defer r.Release()
	hydrate.SetHeaders(c.Response().Header(), r)

	w := &lazyWriter{c: c, service: service}
	err = s.command(r, service, proto).AddDynamic(r.GitDir).Stdin(lr).Stdout(w).Run(req.Context())
	if lr.exceeded {
		if !w.started {
			return wire.Coded("request_too_large",
				fmt.Sprintf("The %s request body exceeds %d bytes.", service, limit))
		}
		s.Log.Warn("git request body over the limit", zap.String("service", service), zap.String("projectId", proj.ID))
		return nil
	}
	if err != nil {
		if !w.started {
			return wire.Internal(err)
		}
		// The response is under way; the client sees the broken stream.
		s.Log.Warn("git service failed mid-response", zap.String("service", service),
			zap.String("projectId", proj.ID), zap.Error(err))
		return nil
	}
	if !w.started {
		// Nothing to say.
		w.Write(nil)
	}
	return nil
}

// limitReader fails once more than n bytes were read.
type limitReader struct {
	r        io.Reader
	n        int64
	exceeded bool
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		if _, err := l.r.Read(make([]byte, 1)); err == io.EOF {
			return 0, io.EOF
		}
		l.exceeded = true
		return 0, errors.New("request body too large")
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}
