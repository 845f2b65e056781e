package callback_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/svc-dev/svc/podagent/internal/callback"
	"github.com/svc-dev/svc/podagent/internal/callback/callbacktest"
	"github.com/svc-dev/svc/shared/wire"
)

// The forwarder's own refusals are the envelope both binaries answer: a
// declared code with its status and type, and the marker header the guest's
// deliverer reads for the two it acts on.
func TestForwarderErrorsAreTheEnvelope(t *testing.T) {
	t.Parallel()
	closed := callbacktest.New(t, 200)
	gone := closed.URL
	closed.Close()
	fw := newForwarder(t, []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")})
	for _, tc := range []struct {
		name, method, target, body, code, header string
	}{
		{"not POST", http.MethodGet, "http://example.com/", "{}", "method_not_allowed", ""},
		{"refused target", http.MethodPost, "http://169.254.169.254/", "{}", "callback_target_refused", callback.HeaderForwardRefused},
		{"no target", http.MethodPost, "", "{}", "callback_target_refused", callback.HeaderForwardRefused},
		{"body too large", http.MethodPost, gone, strings.Repeat("x", callback.MaxForwardBody+1), "request_too_large", ""},
		{"receiver unreachable", http.MethodPost, gone, "{}", "callback_forward_failed", callback.HeaderForwardError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req, _ := http.NewRequest(tc.method, fw.URL, strings.NewReader(tc.body))
			req.Header.Set(callback.HeaderForwardTarget, tc.target)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			raw, _ := io.ReadAll(res.Body)
			var body wire.ErrorBody
			want := wire.Codes[tc.code]
			if err := json.Unmarshal(raw, &body); err != nil || res.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("not the envelope: %d %q %s", res.StatusCode, res.Header.Get("Content-Type"), raw)
			}
			if res.StatusCode != want.Status || body.Error.Code != tc.code || body.Error.Type != want.Type || body.Error.Message == "" {
				t.Fatalf("got %d %s, want %d %s %s", res.StatusCode, raw, want.Status, want.Type, tc.code)
			}
			if tc.header != "" && res.Header.Get(tc.header) == "" {
				t.Fatalf("no %s header", tc.header)
			}
		})
	}
}
