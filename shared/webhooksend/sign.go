package webhooksend

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/svc-dev/svc/shared/wire"
)

// Standard Webhooks headers.
const (
	HeaderID        = standardwebhooks.HeaderWebhookID
	HeaderTimestamp = standardwebhooks.HeaderWebhookTimestamp
	HeaderSignature = standardwebhooks.HeaderWebhookSignature
)

// Key returns the HMAC key of a channel secret: a Standard Webhooks secret
// ("whsec_" + base64) is decoded, any other secret is used as its bytes.
func Key(secret string) []byte {
	if rest, ok := strings.CutPrefix(secret, "whsec_"); ok {
		if k, err := base64.StdEncoding.DecodeString(rest); err == nil && len(k) > 0 {
			return k
		}
	}
	return []byte(secret)
}

// Sign returns the webhook-signature header value of body: "v1,<base64>"
// keyed by secret, followed by one space-separated entry per old secret (a
// rotation's overlap; Standard Webhooks receivers accept any entry that
// verifies).
func Sign(secret, msgID string, ts time.Time, body []byte, old ...string) (string, error) {
	if secret == "" {
		return "", errors.New("the channel has no secret to sign with")
	}
	var sigs []string
	for _, s := range append([]string{secret}, old...) {
		if s == "" {
			continue
		}
		wh, err := standardwebhooks.NewWebhookRaw(Key(s))
		if err != nil {
			return "", err
		}
		sig, err := wh.Sign(msgID, ts, body)
		if err != nil {
			return "", err
		}
		sigs = append(sigs, sig)
	}
	return strings.Join(sigs, " "), nil
}

// SignAsymmetric returns the Standard Webhooks asymmetric signature of
// body: "v1a," and the base64 ed25519 signature, by the whsk_ key, of
// "<msgID>.<unix ts>.<body>".
func SignAsymmetric(signingKey, msgID string, ts time.Time, body []byte) (string, error) {
	sk, err := wire.ParseWebhookSigningKey(signingKey)
	if err != nil {
		return "", err
	}
	content := make([]byte, 0, len(msgID)+len(body)+24)
	content = append(content, msgID...)
	content = append(content, '.')
	content = strconv.AppendInt(content, ts.Unix(), 10)
	content = append(content, '.')
	content = append(content, body...)
	return "v1a," + base64.StdEncoding.EncodeToString(ed25519.Sign(sk, content)), nil
}

// Verify checks the Standard Webhooks headers of a received callback.
func Verify(secret string, body []byte, h http.Header) error {
	wh, err := standardwebhooks.NewWebhookRaw(Key(secret))
	if err != nil {
		return err
	}
	return wh.Verify(body, h)
}

// CallbackBody encodes a callback as the pod's deliverer does: no HTML
// escaping, no trailing newline.
func CallbackBody(cb wire.WebhookCallback) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(cb); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
