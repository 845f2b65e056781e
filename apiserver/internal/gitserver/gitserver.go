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
// Push-back goes into this replica's hydrated copy only, for the pushing
// client: it never writes object storage (the pod is the durable store's
// sole writer), and it records one ProjectCheckpoint row (source
// receive-pack) for the new head.
//
// Authentication: HTTP Basic with the svc_sk_ API key as password (any
// user name) or a Bearer key; a missing or bad key is 401 with
// WWW-Authenticate so git clients ask their credential helper; the key's
// user must be a member of the project's workspace (403 otherwise).
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
	"sort"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/apierr"
	"github.com/svc-dev/svc/apiserver/internal/auth"
	"github.com/svc-dev/svc/apiserver/internal/httpmw"
	"github.com/svc-dev/svc/apiserver/internal/hydrate"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/gitrun"
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
	Hydrate  *hydrate.Manager
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
	if s.Timeout <= 0 {
		s.Timeout = DefaultTimeout
	}
	if s.MaxUploadBody <= 0 {
		s.MaxUploadBody = DefaultMaxUploadBody
	}
	if s.MaxReceiveBytes <= 0 {
		s.MaxReceiveBytes = DefaultMaxReceiveBytes
	}
	return s
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
			e := apierr.InvalidAPIKey()
			e.Message = "Invalid or missing API key. Use HTTP Basic auth with the svc_sk_ key as password (any user name), or 'Authorization: Bearer <key>'."
			e.Headers = map[string]string{"WWW-Authenticate": wwwAuthenticate}
			return e
		}
		if key == "" {
			return unauthorized()
		}
		p, err := s.Auth.APIKey(c.Request().Context(), key)
		if err != nil {
			var ae *apierr.Error
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
		return apierr.BadRequest("invalid_service",
			"Only the smart HTTP protocol is served: ?service=git-upload-pack or ?service=git-receive-pack.")
	}
	r, err := s.Hydrate.Acquire(c.Request().Context(), httpmw.ProjectFrom(c).ID)
	if err != nil {
		return hydrate.APIError(err)
	}
	defer r.Release()
	proto, v2 := gitProtocol(c.Request())
	var out bytes.Buffer
	if !v2 || service == "receive-pack" {
		out.WriteString(pktLine("# service=git-" + service + "\n"))
		out.WriteString("0000")
	}
	if err := s.command(r, service, proto).AddArgs("--advertise-refs").AddDynamic(r.GitDir).
		Stdout(&out).Run(c.Request().Context()); err != nil {
		return apierr.Internal(err)
	}
	h := c.Response().Header()
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
		return apierr.New(http.StatusUnsupportedMediaType, apierr.TypeInvalidRequest, "invalid_content_type",
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
			return apierr.BadRequest("invalid_body", "The request body is not valid gzip.")
		}
		defer zr.Close()
		body = zr
	default:
		return apierr.New(http.StatusUnsupportedMediaType, apierr.TypeInvalidRequest, "invalid_content_encoding",
			"Content-Encoding must be gzip or absent.")
	}
	lr := &limitReader{r: body, n: limit}

	proj := httpmw.ProjectFrom(c)
	r, err := s.Hydrate.Acquire(req.Context(), proj.ID)
	if err != nil {
		return hydrate.APIError(err)
	}
	defer r.Release()
	hydrate.SetHeaders(c.Response().Header(), r)
	proto, _ := gitProtocol(req)

	var before map[string]string
	if service == "receive-pack" {
		if before, err = refs(req.Context(), r); err != nil {
			return apierr.Internal(err)
		}
	}
	w := &lazyWriter{c: c, service: service}
	err = s.command(r, service, proto).AddDynamic(r.GitDir).Stdin(lr).Stdout(w).Run(req.Context())
	if lr.exceeded {
		if !w.started {
			return apierr.New(http.StatusRequestEntityTooLarge, apierr.TypeInvalidRequest, "request_too_large",
				fmt.Sprintf("The %s request body exceeds %d bytes.", service, limit))
		}
		s.Log.Warn("git request body over the limit", zap.String("service", service), zap.String("projectId", proj.ID))
		return nil
	}
	if err != nil {
		if !w.started {
			return apierr.Internal(err)
		}
		// The response is under way; the client sees the broken stream.
		s.Log.Warn("git service failed mid-response", zap.String("service", service),
			zap.String("projectId", proj.ID), zap.Error(err))
		return nil
	}
	if !w.started {
		// Nothing to say (for example an empty receive-pack request).
		w.Write(nil)
	}
	if service == "receive-pack" {
		s.recordPush(req.Context(), r, proj.ID, before)
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

// refs lists refname → object id.
func refs(ctx context.Context, r *hydrate.Repo) (map[string]string, error) {
	out, err := r.Git("for-each-ref", "--format=%(refname)%00%(objectname)").String(ctx)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if name, sha, ok := strings.Cut(line, "\x00"); ok {
			m[name] = sha
		}
	}
	return m, nil
}

// recordPush writes one ProjectCheckpoint row for the new head of a push:
// the branch HEAD points to when the push moved it, otherwise the first
// branch it created or moved. Deleting refs or pushing tags only writes
// none. A failure is logged: the push itself succeeded.
func (s *Server) recordPush(ctx context.Context, r *hydrate.Repo, projectID string, before map[string]string) {
	ctx = context.WithoutCancel(ctx)
	after, err := refs(ctx, r)
	if err != nil {
		s.Log.Warn("listing refs after push", zap.String("projectId", projectID), zap.Error(err))
		return
	}
	var moved []string
	for name, sha := range after {
		if strings.HasPrefix(name, "refs/heads/") && before[name] != sha {
			moved = append(moved, name)
		}
	}
	if len(moved) == 0 {
		return
	}
	sort.Strings(moved)
	ref := moved[0]
	if head, err := r.Git("symbolic-ref", "-q", "HEAD").String(ctx); err == nil {
		for _, m := range moved {
			if m == head {
				ref = m
			}
		}
	}
	sha := after[ref]
	recs, err := hydrate.CommitRecords(ctx, func(args ...gitrun.Arg) *gitrun.Cmd { return r.Git(args...) }, []string{sha})
	if err != nil || len(recs) != 1 {
		s.Log.Warn("reading pushed head", zap.String("projectId", projectID), zap.String("sha", sha), zap.Error(err))
		return
	}
	rec := recs[0]
	rec.Branch = strings.TrimPrefix(ref, "refs/heads/")
	if _, _, err := s.Recorder.RecordCheckpoint(ctx, projectID, rec, SourceReceivePack); err != nil {
		s.Log.Error("recording push-back checkpoint", zap.String("projectId", projectID), zap.String("sha", sha), zap.Error(err))
		return
	}
	s.Log.Info("push-back accepted into the hydrated copy (not persisted)", zap.String("projectId", projectID),
		zap.String("ref", ref), zap.String("sha", sha))
}
