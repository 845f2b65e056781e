package callback

import (
	"net/http"
	"net/netip"
	"time"

	"code.dny.dev/ssrf"

	"github.com/svc-dev/svc/shared/webhooksend"
)

// The SSRF guard is shared with the API's deliveries (package
// shared/webhooksend): one guard, one SVC_CALLBACK_ALLOWED_NETS.

// ErrRefused marks a callback target the SSRF guard refuses.
var ErrRefused = webhooksend.ErrRefused

// ParseAllowedNets parses SVC_CALLBACK_ALLOWED_NETS (webhooksend.ParseAllowedNets).
func ParseAllowedNets(s string) ([]netip.Prefix, error) { return webhooksend.ParseAllowedNets(s) }

// NewGuard returns the SSRF guard (webhooksend.NewGuard).
func NewGuard(allowed []netip.Prefix) *ssrf.Guardian { return webhooksend.NewGuard(allowed) }

// NewHTTPClient returns the guarded client callbacks are sent with
// (webhooksend.NewHTTPClient).
func NewHTTPClient(g *ssrf.Guardian, timeout time.Duration) *http.Client {
	return webhooksend.NewHTTPClient(g, timeout)
}

// CheckURL validates a callbackUrl (webhooksend.CheckURL).
func CheckURL(g *ssrf.Guardian, raw string) error { return webhooksend.CheckURL(g, raw) }
