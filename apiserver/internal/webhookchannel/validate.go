package webhookchannel

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
)

// MaxCallbackHeaders bounds a channel's callbackHeaders.
const MaxCallbackHeaders = 32

// reservedHeaders may not be set through callbackHeaders: hop-by-hop
// headers (RFC 9110 §7.6.1), headers the HTTP client computes, and the
// Standard Webhooks signature headers the pod signs callbacks with.
var reservedHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Proxy-Connection": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"Host": true, "Content-Length": true, "Content-Type": true,
	"Webhook-Id": true, "Webhook-Timestamp": true, "Webhook-Signature": true,
}

// ValidateCallbackHeaders checks headers set in the channel editor: valid
// HTTP header names, no reserved or duplicate names, values without control
// line breaks.
func ValidateCallbackHeaders(h map[string]string) error {
	if len(h) > MaxCallbackHeaders {
		return fmt.Errorf("at most %d callback headers", MaxCallbackHeaders)
	}
	seen := map[string]bool{}
	for k, v := range h {
		if !validHeaderName(k) {
			return fmt.Errorf("%q is not a valid header name (letters, digits and !#$%%&'*+-.^_`|~ only)", k)
		}
		canon := http.CanonicalHeaderKey(k)
		if reservedHeaders[canon] {
			return fmt.Errorf("%s cannot be set as a callback header (hop-by-hop or set by the service)", canon)
		}
		if seen[canon] {
			return fmt.Errorf("%s is given twice", canon)
		}
		seen[canon] = true
		if strings.ContainsAny(v, "\r\n\x00") || len(v) > 4096 {
			return fmt.Errorf("the value of %s must be one line of at most 4096 bytes", canon)
		}
	}
	return nil
}

// NewSecret returns a fresh channel secret in the Standard Webhooks form
// (whsec_ and 32 random bytes in base64; docs/design.md §7).
func NewSecret() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}
