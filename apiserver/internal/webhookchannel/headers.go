// Package webhookchannel holds the rules of a project's webhook channel
// (spec 3.3; docs/webhook-delivery.md) that the console, the outbox and
// the pod's configuration route share: its secret (minted,
// rotated with an overlap, compared in constant time) and its
// callbackHeaders (what may be set, and how the stored object is read).
// The pod reads the configuration through agentapi's GET
// /internal/projects/{id}/channel.
package webhookchannel

import (
	"encoding/json"
	"strings"
)

// DecodeCallbackHeaders turns the stored JSON object into header values:
// strings as they are, other values as their JSON text, null dropped.
// Names that are not valid HTTP header names are dropped too (they would
// make every callback fail).
func DecodeCallbackHeaders(raw string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(raw) == "" {
		return out, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return nil, err
	}
	if m == nil {
		return out, nil
	}
	for k, v := range m {
		if !validHeaderName(k) || string(v) == "null" {
			continue
		}
		var s string
		if json.Unmarshal(v, &s) != nil {
			s = string(v)
		}
		if strings.ContainsAny(s, "\r\n\x00") {
			continue
		}
		out[k] = s
	}
	return out, nil
}

// validHeaderName reports whether k is an RFC 9110 token.
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
