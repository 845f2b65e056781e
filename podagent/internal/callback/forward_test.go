package callback_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/podagent/internal/callback"
	"github.com/svc-dev/svc/podagent/internal/callback/callbacktest"
	"github.com/svc-dev/svc/shared/testenv/testhttp"
)

// forwarder is a host's forwarding endpoint guarded by allowed; outcomes
// counts what it did.
type forwarder struct {
	*httptest.Server
	mu       sync.Mutex
	outcomes map[string]int
}

func newForwarder(t *testing.T, allowed []netip.Prefix) *forwarder {
	f := &forwarder{outcomes: map[string]int{}}
	h := callback.NewForwarder(callback.NewGuard(allowed), 5*time.Second, zaptest.NewLogger(t))
	h.Observe = func(o string) {
		f.mu.Lock()
		f.outcomes[o]++
		f.mu.Unlock()
	}
	f.Server = httptest.NewServer(h)
	t.Cleanup(f.Close)
	return f
}

func (f *forwarder) count(o string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.outcomes[o]
}

// guestDeliverer is a guest's deliverer: its own guard lets everything
// through (as a compromised guest would), so the host's guard decides.
func guestDeliverer(t *testing.T, forwardURL string, attempts int) (*callback.Deliverer, *[]time.Duration) {
	all := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
	return newRecordingDeliverer(t, callback.Options{Guard: callback.NewGuard(all), ForwardURL: forwardURL, Attempts: attempts})
}

// A forwarded callback reaches the receiver with the guest's signature,
// webhook-id and channel headers unchanged; the receiver's status and
// Retry-After come back so the guest's retries work as in a pod.
func TestForwardedCallbackSignedAndRetried(t *testing.T) {
	t.Parallel()
	rcv := callbacktest.New(t, 503, 204)
	rcv.Headers = map[string]string{"Retry-After": "7"}
	fw := newForwarder(t, []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")})
	d, waits := guestDeliverer(t, fw.URL, 3)
	body := []byte(`{"reply":"hi","correlationId":"cor_1","metadata":{}}`)
	res := d.Deliver(context.Background(), callback.Delivery{URL: rcv.URL + "/hook?x=1", MsgID: "msg_1", Secret: "chan-secret",
		Headers: map[string]string{"X-Tenant": "acme", "Authorization": "Bearer receiver-token"}, Body: body})
	if !res.Delivered || res.Attempts != 2 || res.Status != 204 {
		t.Fatalf("result = %+v", res)
	}
	if len(*waits) != 1 || (*waits)[0] < 7*time.Second {
		t.Fatalf("the receiver's Retry-After did not reach the guest: waits %v", *waits)
	}
	got := rcv.Got()
	if len(got) != 2 {
		t.Fatalf("receiver saw %d requests", len(got))
	}
	for _, g := range got {
		h := g.Header
		if string(g.Body) != string(body) || h.Get("webhook-id") != "msg_1" || h.Get("X-Tenant") != "acme" ||
			h.Get("Authorization") != "Bearer receiver-token" || h.Get("Content-Type") != "application/json" {
			t.Fatalf("forwarded request: %v %s", h, g.Body)
		}
		if h.Get(callback.HeaderForwardTarget) != "" {
			t.Fatalf("the forwarding header leaked to the receiver: %v", h)
		}
		if err := callback.Verify("chan-secret", g.Body, h); err != nil {
			t.Fatalf("signature: %v", err)
		}
	}
	if fw.count("forwarded") != 2 {
		t.Fatalf("forwarder outcomes %v", fw.outcomes)
	}
}

// The host's guard refuses what a pod's would, even when the guest's own
// check let the target through; a refusal is permanent (no retry), and a
// host-side network failure is retried like one in a pod.
func TestForwarderRefusesPrivateTargets(t *testing.T) {
	t.Parallel()
	rcv := callbacktest.New(t, 200) // 127.0.0.1: refused by a guard without allowed nets
	_, port, _ := splitPort(rcv.URL)
	fw := newForwarder(t, nil)
	d, waits := guestDeliverer(t, fw.URL, 4)
	targets := []string{
		"http://169.254.169.254/latest/meta-data/",
		"http://10.0.0.1/hook",
		"http://[::1]:" + port + "/",
		"http://localhost:" + port + "/hook", // resolved on the host, refused at connect time
		rcv.URL,
	}
	for _, u := range targets {
		res := d.Deliver(context.Background(), callback.Delivery{URL: u, MsgID: "m", Secret: "s", Body: []byte(`{}`)})
		if res.Delivered || res.Attempts != 1 || !errors.Is(res.Err, callback.ErrRefused) {
			t.Errorf("%s: %+v", u, res)
		}
	}
	if len(rcv.Got()) != 0 || len(*waits) != 0 || fw.count("refused") != len(targets) {
		t.Fatalf("refused targets contacted or retried: %d, %v, %v", len(rcv.Got()), *waits, fw.outcomes)
	}

	closed := callbacktest.New(t, 200)
	url := closed.URL
	closed.Close()
	open := newForwarder(t, []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")})
	d, waits = guestDeliverer(t, open.URL, 3)
	res := d.Deliver(context.Background(), callback.Delivery{URL: url, MsgID: "m", Secret: "s", Body: []byte(`{}`)})
	if res.Delivered || res.Attempts != 3 || res.Status != 0 || errors.Is(res.Err, callback.ErrRefused) || open.count("error") != 3 {
		t.Fatalf("network failure behind the host: %+v, waits %v, outcomes %v", res, *waits, open.outcomes)
	}
}

// A raw request to the forwarder (what a hostile guest can send) gets the
// same treatment: no target or a refused one → 403, only POST.
func TestForwarderRawRequests(t *testing.T) {
	t.Parallel()
	fw := newForwarder(t, nil)
	cases := []struct {
		method, target string
		status         int
	}{
		{http.MethodPost, "", 403},
		{http.MethodPost, "file:///etc/passwd", 403},
		{http.MethodPost, "http://169.254.169.254/", 403},
		{http.MethodPost, "http://user:pw@example.com/", 403},
		{http.MethodGet, "http://example.com/", 405},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, fw.URL, strings.NewReader("{}"))
		req.Header.Set(callback.HeaderForwardTarget, c.target)
		if res, _ := testhttp.Do(t, nil, req, ""); res.StatusCode != c.status {
			t.Errorf("%s %q: %d, want %d", c.method, c.target, res.StatusCode, c.status)
		}
	}
}

// Through a host's forwarder too, a 3xx is a failure neither the host nor
// the guest follows, and a 410 disables the endpoint in the guest.
func TestForwardedRedirectAndGone(t *testing.T) {
	t.Parallel()
	for _, status := range []int{301, 302, 307, 308, 410} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			t.Parallel()
			other := callbacktest.New(t, 200)
			rcv := callbacktest.New(t, status)
			rcv.Headers = map[string]string{"Location": other.URL}
			fw := newForwarder(t, []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")})
			d, waits := guestDeliverer(t, fw.URL, 3)
			del := callback.Delivery{URL: rcv.URL, MsgID: "m", Secret: "s", Body: []byte(`{}`)}
			res := d.Deliver(context.Background(), del)
			if res.Delivered || res.Attempts != 1 || res.Status != status || len(*waits) != 0 || len(other.Got()) != 0 {
				t.Fatalf("result %+v, waits %v, redirect target got %d", res, *waits, len(other.Got()))
			}
			again := d.Deliver(context.Background(), del)
			if gone := errors.Is(again.Err, callback.ErrEndpointGone); gone != (status == 410) || (gone && again.Attempts != 0) {
				t.Fatalf("second delivery after %d: %+v", status, again)
			}
		})
	}
}
