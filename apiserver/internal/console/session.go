package console

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/apiserver/internal/console/login"
	"github.com/svc-dev/svc/apiserver/internal/store"
)

// Cookie names. The session cookie is HttpOnly, SameSite=Lax, Path=/ (the
// JSON key API lives under /api), and Secure when served over TLS.
const (
	SessionCookie = "svc_session"
	// preCSRFCookie carries the double-submit token of the sign-in forms,
	// which have no session yet.
	preCSRFCookie = "svc_signin_csrf"
	// CSRFHeader carries the session's CSRF token on htmx and JSON requests.
	CSRFHeader = "X-CSRF-Token"
	csrfField  = "csrf"
	// touchEvery bounds how often a session's idle expiry is written.
	touchEvery = time.Minute
)

type session struct {
	row  store.Session
	user store.User
}

const sessionKey = "svc.console.session"

func sessionFrom(ec echo.Context) (session, bool) {
	s, ok := ec.Get(sessionKey).(session)
	return s, ok
}

func (c *Console) secure(r *http.Request) bool {
	return c.o.SecureCookies || r.TLS != nil
}

func (c *Console) setCookie(ec echo.Context, name, value string, maxAge int) {
	http.SetCookie(ec.Response(), &http.Cookie{Name: name, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: c.secure(ec.Request()), SameSite: http.SameSiteLaxMode})
}

// startSession creates the session row and sets its cookie.
func (c *Console) startSession(ec echo.Context, userID string) error {
	token, now := login.RandomToken(), c.o.Now().UTC()
	row := store.Session{TokenHash: login.TokenHash(token), UserID: userID, CSRFToken: login.RandomToken(),
		CreatedAt: now, LastSeenAt: now, ExpiresAt: now.Add(c.o.AbsoluteTimeout)}
	if err := c.o.Store.CreateSession(ec.Request().Context(), row); err != nil {
		return err
	}
	c.setCookie(ec, SessionCookie, token, int(c.o.AbsoluteTimeout/time.Second))
	return nil
}

// loadSession reads the session cookie; ok is false when there is no live
// session (an expired one is deleted).
func (c *Console) loadSession(ctx context.Context, r *http.Request) (session, bool, error) {
	ck, err := r.Cookie(SessionCookie)
	if err != nil || ck.Value == "" || len(ck.Value) > 100 {
		return session{}, false, nil
	}
	h := login.TokenHash(ck.Value)
	row, err := c.o.Store.GetSession(ctx, h)
	if errors.Is(err, store.ErrNotFound) {
		return session{}, false, nil
	}
	if err != nil {
		return session{}, false, err
	}
	now := c.o.Now()
	if !now.Before(row.ExpiresAt) || now.Sub(row.LastSeenAt) >= c.o.IdleTimeout {
		_ = c.o.Store.DeleteSession(ctx, h)
		return session{}, false, nil
	}
	u, err := c.o.Store.GetUser(ctx, row.UserID)
	if errors.Is(err, store.ErrNotFound) {
		return session{}, false, nil
	}
	if err != nil {
		return session{}, false, err
	}
	if now.Sub(row.LastSeenAt) >= touchEvery {
		if err := c.o.Store.TouchSession(ctx, h, now); err != nil {
			return session{}, false, err
		}
	}
	return session{row: row, user: u}, true, nil
}

// RequireSession guards console pages: no live session redirects to the
// sign-in page (with the page to come back to), and an unsafe method needs
// the session's CSRF token.
func (c *Console) RequireSession(next echo.HandlerFunc) echo.HandlerFunc {
	return func(ec echo.Context) error {
		s, ok, err := c.loadSession(ec.Request().Context(), ec.Request())
		if err != nil {
			return err
		}
		if !ok {
			if ec.Request().Method != http.MethodGet {
				return c.errorPage(ec, http.StatusUnauthorized, "Your session has ended. Sign in again.")
			}
			return ec.Redirect(http.StatusSeeOther, "/console/sign-in?next="+url.QueryEscape(ec.Request().URL.RequestURI()))
		}
		ec.Set(sessionKey, s)
		if unsafeMethod(ec.Request().Method) && !c.csrfOK(ec, s.row.CSRFToken) {
			return c.errorPage(ec, http.StatusForbidden, "This form has expired or did not come from the console (CSRF check failed). Reload the page and try again.")
		}
		return next(ec)
	}
}

func unsafeMethod(m string) bool {
	return m != http.MethodGet && m != http.MethodHead && m != http.MethodOptions
}

// csrfOK checks the token of an unsafe request (form field or header, in
// constant time) and, when the browser sent one, that Origin is this host.
func (c *Console) csrfOK(ec echo.Context, want string) bool {
	r := ec.Request()
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return false
		}
	}
	got := r.Header.Get(CSRFHeader)
	if got == "" {
		got = ec.FormValue(csrfField)
	}
	return got != "" && want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// preCSRF returns the sign-in forms' double-submit token, setting its
// cookie when missing.
func (c *Console) preCSRF(ec echo.Context) string {
	if ck, err := ec.Request().Cookie(preCSRFCookie); err == nil && len(ck.Value) == 43 {
		return ck.Value
	}
	t := login.RandomToken()
	c.setCookie(ec, preCSRFCookie, t, 3600)
	return t
}

// preCSRFOK checks a sign-in form's token against its cookie.
func (c *Console) preCSRFOK(ec echo.Context) bool {
	ck, err := ec.Request().Cookie(preCSRFCookie)
	if err != nil || ck.Value == "" {
		return false
	}
	return c.csrfOK(ec, ck.Value)
}
