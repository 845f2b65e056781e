package callback_test

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/podagent/internal/callback"
	"github.com/svc-dev/svc/podagent/internal/callback/callbacktest"
	"github.com/svc-dev/svc/shared/wire"
)

// verifyV1a is an independent verifier written from the Standard Webhooks
// text ("v1a," and the base64 ed25519 signature of "id.timestamp.body",
// the public key "whpk_" and base64): neither the Standard Webhooks Go
// library nor svix's Go library verifies v1a, so crypto/ed25519 does.
func verifyV1a(t *testing.T, publicKey string, body []byte, h map[string][]string) bool {
	t.Helper()
	get := func(k string) string {
		for name, vs := range h {
			if strings.EqualFold(name, k) && len(vs) > 0 {
				return vs[0]
			}
		}
		return ""
	}
	pk, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(publicKey, "whpk_"))
	if err != nil || len(pk) != ed25519.PublicKeySize || !strings.HasPrefix(publicKey, "whpk_") {
		t.Fatalf("public key %q", publicKey)
	}
	content := get("webhook-id") + "." + get("webhook-timestamp") + "." + string(body)
	for _, entry := range strings.Fields(get("webhook-signature")) {
		sig, ok := strings.CutPrefix(entry, "v1a,")
		if !ok {
			continue
		}
		b, err := base64.StdEncoding.DecodeString(sig)
		if err == nil && ed25519.Verify(ed25519.PublicKey(pk), []byte(content), b) {
			return true
		}
	}
	return false
}

// Svix's own test vector (its server signs v1a with this whsk_ key).
func TestSignAsymmetricVector(t *testing.T) {
	t.Parallel()
	const sk = "whsk_6Xb/dCcHpPea21PS1N9VY/NZW723CEc77N4rJCubMbfVKIDij2HKpMKkioLlX0dRqSKJp4AJ6p9lMicMFs6Kvg=="
	sig, err := callback.SignAsymmetric(sk, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	want := "v1a,hnO3f9T8Ytu9HwrXslvumlUpqtNVqkhqw/enGzPCXe5BdqzCInXqYXFymVJaA7AZdpXwVLPo3mNl8EM+m7TBAg=="
	if err != nil || sig != want {
		t.Fatalf("sig = %q, %v; want %q", sig, err, want)
	}
	for _, bad := range []string{"", "whsec_abc", "whsk_" + base64.StdEncoding.EncodeToString(make([]byte, 32)), "whsk_%%%"} {
		if _, err := callback.SignAsymmetric(bad, "m", time.Unix(1, 0), nil); err == nil {
			t.Fatalf("signed with %q", bad)
		}
	}
}

// A channel with a signing key sends v1 and v1a: a receiver holding the
// public key only verifies v1a, one holding the secret still verifies v1
// with the Standard Webhooks library, another key's public half does not
// verify, and retries are signed anew.
func TestDeliverSignsV1aBesideV1(t *testing.T) {
	t.Parallel()
	sk, err := wire.NewWebhookSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	pk, err := wire.WebhookPublicKey(sk)
	if err != nil {
		t.Fatal(err)
	}
	otherSK, _ := wire.NewWebhookSigningKey()
	otherPK, _ := wire.WebhookPublicKey(otherSK)
	rcv := callbacktest.New(t, 503, 200)
	d, _ := newDeliverer(t, loopback, 3)
	body := []byte(`{"reply":"hi","correlationId":"cor_1","metadata":{}}`)
	res := d.Deliver(context.Background(), callback.Delivery{URL: rcv.URL, MsgID: "msg_a", Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		SigningKey: sk, Body: body})
	if !res.Delivered || res.Attempts != 2 {
		t.Fatalf("result = %+v", res)
	}
	for i, got := range rcv.Got() {
		if n := len(strings.Fields(got.Header.Get("webhook-signature"))); n != 2 {
			t.Fatalf("attempt %d: webhook-signature %q, want v1 and v1a", i, got.Header.Get("webhook-signature"))
		}
		if !verifyV1a(t, pk, got.Body, got.Header) {
			t.Fatalf("attempt %d: v1a does not verify with %s", i, pk)
		}
		if verifyV1a(t, otherPK, got.Body, got.Header) {
			t.Fatalf("attempt %d: another key's public half verified", i)
		}
		if verifyV1a(t, pk, append([]byte(" "), got.Body...), got.Header) {
			t.Fatalf("attempt %d: a changed body verified", i)
		}
		if err := callback.Verify("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", got.Body, got.Header); err != nil {
			t.Fatalf("attempt %d: v1 beside v1a: %v", i, err)
		}
	}
	// A key that does not parse fails the delivery at once, unsent.
	bad := callbacktest.New(t, 200)
	if res := d.Deliver(context.Background(), callback.Delivery{URL: bad.URL, MsgID: "m", Secret: "s", SigningKey: "whsk_x", Body: body}); res.Delivered || len(bad.Got()) != 0 {
		t.Fatalf("a bad signing key: %+v, %d requests", res, len(bad.Got()))
	}
}
