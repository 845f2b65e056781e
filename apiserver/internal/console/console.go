// Package console is the web console served by apiserver itself (
// docs/design.md §7 "console"): the app in which, as spec 5.1.3 puts it, API keys
// are "created, managed and revoked … under Settings, API Keys", the
// "studio channel editor" of spec 2.5 that sets a channel's secret and
// callbackHeaders, and the commit graph whose publish/* tags carry a
// Published badge (spec 6). It also serves the JSON key-management API
// (GET/POST /api/workspaces/{id}/keys, DELETE …/keys/{keyId}).
//
// Pages are server-rendered html/template with a vendored htmx and a small
// script, embedded with go:embed: no build step, readable with JavaScript off.
// Handlers are thin over the store and the services the APIs use (apikey,
// metering, checkpointreads' reads, the runtime router for channel health
// and activity). Users sign in with an argon2id password or a one-time link
// (admin CLI), hold a server-side session (idle and absolute expiry), and
// every unsafe request carries the session's CSRF token. A signed-in user
// sees only the workspaces they belong to; anything else is 404.
package console

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/auth"
	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/checkpointreads"
	"github.com/svc-dev/svc/apiserver/internal/console/login"
	"github.com/svc-dev/svc/apiserver/internal/runtimes"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/webhooklog"
	"github.com/svc-dev/svc/apiserver/internal/webhookqueue"
	"github.com/svc-dev/svc/shared/settings"
)

//go:embed templates/*.tmpl
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Defaults.
const (
	DefaultIdleTimeout     = 12 * time.Hour
	DefaultAbsoluteTimeout = 7 * 24 * time.Hour
	// SignInPerMinuteIP and SignInPerMinuteEmail bound sign-in attempts,
	// counted in the shared rate counters so every replica sees them.
	SignInPerMinuteIP    = 20
	SignInPerMinuteEmail = 5
)

// Options are what the console is built from.
type Options struct {
	Store   *store.Store
	Catalog *catalog.Catalog
	// Auth authenticates the owner keys of the JSON key API.
	Auth *auth.Authenticator
	// Checkpoints serves the project pages' reads (nil: not shown).
	Checkpoints *checkpointreads.API
	// Runtime reaches a project's agent for channel health, activity and
	// test messages (nil: not shown).
	Runtime runtimes.Driver
	// Transport carries requests to agents whose endpoint has none.
	Transport http.RoundTripper
	// Webhooks is the webhook attempt log, replay and endpoint health
	// shown on the channel page (nil: not shown).
	Webhooks *webhooklog.Log
	// Recovery replays a range of the channel's messages (nil: the form
	// is not shown).
	Recovery *webhookqueue.Recovery
	Log      *zap.Logger
	// PublicURL is the base of the incoming URL shown in the channel editor
	// ("" : the scheme and host of the request).
	PublicURL string
	// SecureCookies forces the Secure flag; it is also set for requests that
	// arrived over TLS.
	SecureCookies   bool
	IdleTimeout     time.Duration
	AbsoluteTimeout time.Duration
	Now             func() time.Time
}

// Console holds the handlers.
type Console struct {
	o     Options
	pages map[string]*template.Template
	// dummyHash is verified when an email is unknown, so that a sign-in
	// takes as long whether or not the user exists.
	dummyHash string
}

// New parses the templates; it fails only on a broken build.
func New(o Options) (*Console, error) {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.IdleTimeout = settings.PositiveOr(o.IdleTimeout, DefaultIdleTimeout)
	if o.AbsoluteTimeout <= 0 {
		o.AbsoluteTimeout = DefaultAbsoluteTimeout
	}
	if o.Transport == nil {
		o.Transport = http.DefaultTransport
	}
	c := &Console{o: o, pages: map[string]*template.Template{}}
	names, err := fs.Glob(templateFS, "templates/*.tmpl")
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		base := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".tmpl")
		if base == "layout" {
			continue
		}
		t, err := template.New(base).Funcs(funcs).ParseFS(templateFS, "templates/layout.tmpl", n)
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", n, err)
		}
		c.pages[base] = t
	}
	if c.dummyHash, err = login.HashPassword("not a password of anyone"); err != nil {
		return nil, err
	}
	return c, nil
}

// Static serves the embedded CSS and scripts (long-cached: the file names
// are versioned by the binary's build, and they are small).
func (c *Console) Static() echo.HandlerFunc {
	sub, _ := fs.Sub(staticFS, "static")
	h := http.StripPrefix("/console/static/", http.FileServer(http.FS(sub)))
	return func(ec echo.Context) error {
		ec.Response().Header().Set("Cache-Control", "public, max-age=3600")
		h.ServeHTTP(ec.Response(), ec.Request())
		return nil
	}
}

// page is what every template gets.
type page struct {
	Title      string
	User       store.User
	CSRF       string
	Workspaces []store.UserWorkspace
	WS         *store.UserWorkspace
	Nav        string
	Flash      string
	Error      string
	Data       any
}

// render writes a full page (or, for a name with a "#", one template of it).
func (c *Console) render(ec echo.Context, status int, name string, p page) error {
	tmplName, data := "layout", any(p)
	if pg, frag, ok := strings.Cut(name, "#"); ok {
		name, tmplName, data = pg, frag, p.Data // a fragment gets the page's data
	}
	t, ok := c.pages[name]
	if !ok {
		return fmt.Errorf("console: no page %q", name)
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, tmplName, data); err != nil {
		return fmt.Errorf("console: render %s: %w", name, err)
	}
	setPageHeaders(ec.Response().Header())
	return ec.HTMLBlob(status, buf.Bytes())
}

// setPageHeaders: no caching of pages (they hold CSRF tokens and secrets
// shown once), no framing, scripts only from the console itself.
func setPageHeaders(h http.Header) {
	h.Set("Cache-Control", "no-store")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
}

// errorPage answers a page request with a readable error.
func (c *Console) errorPage(ec echo.Context, status int, msg string) error {
	p := page{Title: http.StatusText(status), Error: msg}
	if s, ok := sessionFrom(ec); ok {
		p.User, p.CSRF = s.user, s.row.CSRFToken
		p.Workspaces, _ = c.o.Store.ListUserWorkspaces(ec.Request().Context(), s.user.ID)
	}
	return c.render(ec, status, "error", p)
}

var funcs = template.FuncMap{
	"credits": credits,
	"age": func(sec *float64) string {
		if sec == nil {
			return "—"
		}
		return time.Duration(*sec * float64(time.Second)).Round(time.Second).String()
	},
	"when": func(t any) string {
		switch v := t.(type) {
		case time.Time:
			if v.IsZero() {
				return "—"
			}
			return v.UTC().Format("2006-01-02 15:04 UTC")
		case *time.Time:
			if v == nil || v.IsZero() {
				return "—"
			}
			return v.UTC().Format("2006-01-02 15:04 UTC")
		}
		return "—"
	},
	"iso": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"short": func(sha string) string {
		if len(sha) > 10 {
			return sha[:10]
		}
		return sha
	},
	"diffClass": func(line string) string {
		switch {
		case strings.HasPrefix(line, "+++"), strings.HasPrefix(line, "---"), strings.HasPrefix(line, "diff "),
			strings.HasPrefix(line, "index "):
			return "meta"
		case strings.HasPrefix(line, "@@"):
			return "hunk"
		case strings.HasPrefix(line, "+"):
			return "add"
		case strings.HasPrefix(line, "-"):
			return "del"
		}
		return ""
	},
}

// credits shows millionths of a credit with two decimals, or up to six
// when the amount is smaller than a cent.
func credits(micro int64) string {
	v := float64(micro) / 1e6
	if micro != 0 && micro < 10_000 && micro > -10_000 {
		return strings.TrimRight(fmt.Sprintf("%.6f", v), "0")
	}
	return fmt.Sprintf("%.2f", v)
}
