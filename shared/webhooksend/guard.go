package webhooksend

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"code.dny.dev/ssrf"
)

// ErrRefused marks a callback target the SSRF guard refuses.
var ErrRefused = errors.New("callback target refused")

// ParseAllowedNets parses SVC_CALLBACK_ALLOWED_NETS: CIDRs (or single
// addresses) separated by commas or spaces.
func ParseAllowedNets(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
		p, err := netip.ParsePrefix(f)
		if err != nil {
			a, aerr := netip.ParseAddr(f)
			if aerr != nil {
				return nil, fmt.Errorf("SVC_CALLBACK_ALLOWED_NETS: %q is not a CIDR", f)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// NewGuard returns the SSRF guard: every IANA special-purpose range
// (loopback, private, link-local including 169.254.169.254, CGNAT, …) and
// every IPv6 address outside global unicast is refused unless it is in
// allowed; any port is permitted.
func NewGuard(allowed []netip.Prefix) *ssrf.Guardian {
	var v4, v6 []netip.Prefix
	for _, p := range allowed {
		if p.Addr().Is4() {
			v4 = append(v4, p)
			// The same range as IPv4-mapped IPv6 (::ffff:a.b.c.d).
			m := netip.AddrFrom16(p.Addr().As16())
			v6 = append(v6, netip.PrefixFrom(m, 96+p.Bits()))
		} else {
			v6 = append(v6, p)
		}
	}
	return ssrf.New(ssrf.WithAnyPort(), ssrf.WithAllowedV4Prefixes(v4...), ssrf.WithAllowedV6Prefixes(v6...))
}

// NewHTTPClient returns the client callbacks are sent with: the guard
// checks every address at connect time (after DNS resolution, so DNS
// rebinding cannot slip through), no proxy from the environment, and
// redirects are not followed (the 3xx is the answer).
func NewHTTPClient(g *ssrf.Guardian, timeout time.Duration) *http.Client {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, Control: g.Safe}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   10,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	return &http.Client{
		Transport:     tr,
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// CheckURL validates a callbackUrl when a request arrives: an absolute
// http or https URL with a host and no user info; a literal IP address must
// pass the guard. Host names are checked at connect time.
func CheckURL(g *ssrf.Guardian, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("not a URL: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return errors.New("the scheme must be http or https")
	}
	if u.Host == "" || u.Hostname() == "" {
		return errors.New("the URL has no host")
	}
	if u.User != nil {
		return errors.New("credentials in the URL are not allowed; use callbackHeaders")
	}
	if a, err := netip.ParseAddr(strings.Trim(u.Hostname(), "[]")); err == nil {
		if err := g.SafeAddr(a.Unmap()); err != nil {
			return fmt.Errorf("%w: %v", ErrRefused, err)
		}
	}
	return nil
}
