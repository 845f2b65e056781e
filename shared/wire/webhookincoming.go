package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// ParseWebhookIncoming validates a body of POST .../incoming (spec 2.4): a
// JSON object whose message is a string that is not empty or only white
// space; senderId, senderName and callbackUrl (or sender_id, sender_name,
// callback_url) strings when present; metadata an object when present.
// Both sides call it: the API's agent-proxy before it routes the message
// (a bad body never reaches, or starts, an agent), and the pod again before
// it takes the message. It never fails with anything but a 400 *Error.
func ParseWebhookIncoming(body []byte) (WebhookIncoming, error) {
	var in WebhookIncoming
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	if len(bytes.TrimSpace(body)) == 0 {
		return in, Coded("invalid_body", "The body must be a JSON object with a string 'message'.")
	}
	if err := dec.Decode(&fields); err != nil || fields == nil || dec.More() {
		return in, Coded("invalid_json", "The body must be a JSON object with a string 'message'.")
	}
	present := func(k string) (json.RawMessage, bool) {
		v, ok := fields[k]
		if !ok || string(v) == "null" {
			return nil, false
		}
		return v, true
	}
	raw, ok := present("message")
	if !ok {
		return in, Coded("missing_message", "'message' is required and must be a string.")
	}
	if json.Unmarshal(raw, &in.Message) != nil || raw[0] != '"' {
		return in, Coded("invalid_message", "'message' must be a string.")
	}
	if strings.TrimSpace(in.Message) == "" {
		return in, Coded("invalid_message", "'message' must not be empty.")
	}
	str := func(dst *string, camel, snake, code string) error {
		for _, k := range []string{camel, snake} {
			v, ok := present(k)
			if !ok {
				continue
			}
			if v[0] != '"' || json.Unmarshal(v, dst) != nil {
				return Coded(code, fmt.Sprintf("'%s' must be a string.", k))
			}
			return nil
		}
		return nil
	}
	if err := str(&in.SenderID, "senderId", "sender_id", "invalid_sender_id"); err != nil {
		return in, err
	}
	if err := str(&in.SenderName, "senderName", "sender_name", "invalid_sender_name"); err != nil {
		return in, err
	}
	if err := str(&in.CallbackURL, "callbackUrl", "callback_url", "invalid_callback_url"); err != nil {
		return in, err
	}
	if v, ok := present("metadata"); ok {
		if v[0] != '{' {
			return in, Coded("invalid_metadata", "'metadata' must be a JSON object.")
		}
		in.Metadata = v
	}
	return in, nil
}
