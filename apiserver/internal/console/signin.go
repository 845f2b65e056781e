package console

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/console/login"
	"github.com/svc-dev/svc/apiserver/internal/store"
)

type signInData struct {
	Email, Next, Token string
}

// safeNext keeps a post-sign-in redirect inside the console.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/console") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return "/console"
	}
	return next
}

// SignInPage is GET /console/sign-in.
func (c *Console) SignInPage(ec echo.Context) error {
	if _, ok, _ := c.loadSession(ec.Request().Context(), ec.Request()); ok {
		return ec.Redirect(http.StatusSeeOther, safeNext(ec.QueryParam("next")))
	}
	return c.render(ec, http.StatusOK, "signin", page{Title: "Sign in", CSRF: c.preCSRF(ec),
		Data: signInData{Next: safeNext(ec.QueryParam("next"))}})
}

// SignIn is POST /console/sign-in: email and password, rate limited per
// client address and per email.
func (c *Console) SignIn(ec echo.Context) error {
	email := strings.TrimSpace(ec.FormValue("email"))
	password := ec.FormValue("password")
	next := safeNext(ec.FormValue("next"))
	fail := func(status int, msg string) error {
		return c.render(ec, status, "signin", page{Title: "Sign in", CSRF: c.preCSRF(ec), Error: msg,
			Data: signInData{Email: email, Next: next}})
	}
	if !c.preCSRFOK(ec) {
		return fail(http.StatusForbidden, "The sign-in form expired. Try again.")
	}
	ctx := ec.Request().Context()
	if retry, limited, err := c.signInLimited(ctx, ec.Request(), email); err != nil {
		return err
	} else if limited {
		ec.Response().Header().Set("Retry-After", strconv.Itoa(retry))
		return fail(http.StatusTooManyRequests, fmt.Sprintf("Too many sign-in attempts. Try again in %d seconds.", retry))
	}
	u, err := c.o.Store.FindUserByEmail(ctx, email)
	hash := c.dummyHash
	if err == nil && u.PasswordHash != "" {
		hash = u.PasswordHash
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	ok, verr := login.VerifyPassword(password, hash)
	if verr != nil {
		c.o.Log.Error("stored password hash is unreadable", zap.String("user_id", u.ID), zap.Error(verr))
	}
	if err != nil || u.PasswordHash == "" || !ok {
		return fail(http.StatusUnauthorized, "Wrong email or password.")
	}
	if err := c.startSession(ec, u.ID); err != nil {
		return err
	}
	return ec.Redirect(http.StatusSeeOther, next)
}

// signInLimited counts one attempt for the client address and the email in
// the current minute (shared by every replica).
func (c *Console) signInLimited(ctx context.Context, r *http.Request, email string) (retryAfter int, limited bool, err error) {
	ip, _, splitErr := net.SplitHostPort(r.RemoteAddr)
	if splitErr != nil {
		ip = r.RemoteAddr
	}
	now := c.o.Now()
	minute := now.Truncate(time.Minute)
	ipKey, emailKey := "console-signin:ip:"+ip, "console-signin:email:"+strings.ToLower(email)
	counts, err := c.o.Store.IncrRateCounters(ctx, minute.UnixMilli(), ipKey, emailKey)
	if err != nil {
		return 0, false, err
	}
	if counts[ipKey] > SignInPerMinuteIP || counts[emailKey] > SignInPerMinuteEmail {
		return int(minute.Add(time.Minute).Sub(now)/time.Second) + 1, true, nil
	}
	return 0, false, nil
}

// LinkPage is GET /console/link/{token}: a button that signs in. The link
// itself changes nothing, so a mail scanner that fetches it does not use
// it up.
func (c *Console) LinkPage(ec echo.Context) error {
	return c.render(ec, http.StatusOK, "link", page{Title: "Sign in", CSRF: c.preCSRF(ec),
		Data: signInData{Token: ec.Param("token")}})
}

// UseLink is POST /console/link: uses the one-time link and signs in.
func (c *Console) UseLink(ec echo.Context) error {
	if !c.preCSRFOK(ec) {
		return c.render(ec, http.StatusForbidden, "link", page{Title: "Sign in", CSRF: c.preCSRF(ec),
			Error: "The form expired. Try again.", Data: signInData{Token: ec.FormValue("token")}})
	}
	token := ec.FormValue("token")
	if token == "" || len(token) > 100 {
		return c.errorPage(ec, http.StatusBadRequest, "This sign-in link is not valid.")
	}
	userID, err := c.o.Store.ConsumeLoginToken(ec.Request().Context(), login.TokenHash(token), c.o.Now())
	if errors.Is(err, store.ErrTokenUsed) || errors.Is(err, store.ErrNotFound) {
		return c.errorPage(ec, http.StatusGone, "This sign-in link was already used or has expired. Ask an operator for a new one (apiserver admin user login-link).")
	}
	if err != nil {
		return err
	}
	if err := c.startSession(ec, userID); err != nil {
		return err
	}
	return ec.Redirect(http.StatusSeeOther, "/console")
}

// SignOut is POST /console/sign-out (behind RequireSession).
func (c *Console) SignOut(ec echo.Context) error {
	s, _ := sessionFrom(ec)
	if err := c.o.Store.DeleteSession(ec.Request().Context(), s.row.TokenHash); err != nil {
		return err
	}
	c.setCookie(ec, SessionCookie, "", -1)
	return ec.Redirect(http.StatusSeeOther, "/console/sign-in")
}
