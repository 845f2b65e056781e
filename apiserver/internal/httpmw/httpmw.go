// Package httpmw holds the echo middleware of the API server: it
// authenticates once and puts a typed auth.Principal in the request context,
// which handlers read with PrincipalFrom (coder's httpmw pattern).
package httpmw

import (
	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/apiserver/internal/auth"
	"github.com/svc-dev/svc/shared/wire"
)

const principalKey = "svc.principal"

// PrincipalFrom returns the authenticated caller; it panics when the route
// has no auth middleware, which is a programming error.
func PrincipalFrom(c echo.Context) auth.Principal {
	return c.Get(principalKey).(auth.Principal)
}

// SetPrincipal stores p in the context (for middleware of other packages).
func SetPrincipal(c echo.Context, p auth.Principal) { c.Set(principalKey, p) }

// APIKey requires a service API key as a bearer token.
func APIKey(a *auth.Authenticator) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			p, err := a.APIKey(c.Request().Context(), auth.Bearer(c.Request().Header.Get("Authorization")))
			if err != nil {
				return err
			}
			SetPrincipal(c, p)
			return next(c)
		}
	}
}

// AnthropicKey requires a service API key as Anthropic's clients send one:
// in x-api-key, or as a bearer token (the Messages routes).
func AnthropicKey(a *auth.Authenticator) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			h := c.Request().Header
			token := h.Get("X-Api-Key")
			if token == "" {
				token = auth.Bearer(h.Get("Authorization"))
			}
			p, err := a.APIKey(c.Request().Context(), token)
			if err != nil {
				return err
			}
			SetPrincipal(c, p)
			return next(c)
		}
	}
}

// Runtime requires the runtime token of the project named by the route
// parameter param.
func Runtime(a *auth.Authenticator, param string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			token := auth.Bearer(c.Request().Header.Get("Authorization"))
			if token == "" {
				return wire.Coded("invalid_runtime_token", "Missing runtime token.")
			}
			p, err := a.Runtime(c.Request().Context(), token, c.Param(param))
			if err != nil {
				return err
			}
			SetPrincipal(c, p)
			return next(c)
		}
	}
}
