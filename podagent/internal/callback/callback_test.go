package callback_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"sync"
	"testing"
	"time"

	"code.dny.dev/ssrf"
	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/podagent/internal/callback"
	"github.com/svc-dev/svc/podagent/internal/callback/callbacktest"
)

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// newDeliverer records backoff waits instead of sleeping.
func newDeliverer(t *testing.T, allowed []netip.Prefix, attempts int) (*callback.Deliverer, *[]time.Duration) {
	return newRecordingDeliverer(t, callback.Options{Guard: callback.NewGuard(allowed), Attempts: attempts})
}

// newRecordingDeliverer is a Deliverer of o with the tests' retry timing,
// recording its backoff waits instead of sleeping.
func newRecordingDeliverer(t *testing.T, o callback.Options) (*callback.Deliverer, *[]time.Duration) {
	var waits []time.Duration
	var mu sync.Mutex
	o.RetryBase, o.RetryMax, o.AttemptTimeout, o.Log = 100*time.Millisecond, time.Second, 5*time.Second, zaptest.NewLogger(t)
	o.Sleep = func(ctx context.Context, d time.Duration) error {
		mu.Lock()
		waits = append(waits, d)
		mu.Unlock()
		return ctx.Err()
	}
	return callback.New(o), &waits
}

func TestDeliverSignedWithHeaders(t *testing.T) {
	t.Parallel()
	rcv := callbacktest.New(t, 204)
	d, _ := newDeliverer(t, loopback, 3)
	body := []byte(`{"reply":"hi","correlationId":"cor_1","metadata":{"a":1}}`)
	res := d.Deliver(context.Background(), callback.Delivery{URL: rcv.URL + "/hook", MsgID: "msg_1", Secret: "chan-secret",
		Headers: map[string]string{"X-Tenant": "acme", "Content-Type": "text/plain", "webhook-id": "forged", "bad name": "x", "Host": "evil.example"}, Body: body})
	if !res.Delivered || res.Attempts != 1 || res.Status != 204 {
		t.Fatalf("result = %+v", res)
	}
	got := rcv.Got()[0]
	if string(got.Body) != string(body) {
		t.Fatalf("body = %s", got.Body)
	}
	h := got.Header
	if h.Get("Content-Type") != "application/json" || h.Get("X-Tenant") != "acme" || h.Get("webhook-id") != "msg_1" {
		t.Fatalf("headers = %v", h)
	}
	if err := callback.Verify("chan-secret", got.Body, h); err != nil {
		t.Fatalf("signature: %v", err)
	}
	if err := callback.Verify("other-secret", got.Body, h); err == nil {
		t.Fatal("a wrong secret verified")
	}
}

func TestWhsecSecretIsBase64Key(t *testing.T) {
	t.Parallel()
	// The Standard Webhooks test vector.
	sig, err := callback.Sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek",
		time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if err != nil || sig != "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=" {
		t.Fatalf("sig = %q, %v", sig, err)
	}
}

func TestRetriesUntilSuccessWithSameID(t *testing.T) {
	t.Parallel()
	rcv := callbacktest.New(t, 503, 503, 200)
	d, waits := newDeliverer(t, loopback, 5)
	res := d.Deliver(context.Background(), callback.Delivery{URL: rcv.URL, MsgID: "msg_same", Secret: "s", Body: []byte(`{}`)})
	if !res.Delivered || res.Attempts != 3 {
		t.Fatalf("result = %+v", res)
	}
	got := rcv.Got()
	if len(got) != 3 {
		t.Fatalf("%d requests", len(got))
	}
	for _, g := range got {
		if g.Header.Get("webhook-id") != "msg_same" {
			t.Fatalf("webhook-id = %q", g.Header.Get("webhook-id"))
		}
		if err := callback.Verify("s", g.Body, g.Header); err != nil {
			t.Fatal(err)
		}
	}
	if len(*waits) != 2 || (*waits)[0] < 80*time.Millisecond || (*waits)[1] < 160*time.Millisecond {
		t.Fatalf("backoff waits = %v", *waits)
	}
}

// Retry-After on 429, 502, 503 and 504 is honoured in both forms
// (delay-seconds and an HTTP date) and capped at MaxRetryAfter; a shorter
// one never shortens the backoff.
func TestRetryAfterHonoured(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	date := func(d time.Duration) string { return now.Add(d).Format(http.TimeFormat) }
	for _, status := range []int{429, 502, 503, 504} {
		for _, tc := range []struct {
			name, value string
			want        time.Duration
		}{
			{"seconds", "7", 7 * time.Second},
			{"http date", date(90 * time.Second), 90 * time.Second},
			{"seconds capped", "86400", callback.MaxRetryAfter},
			{"http date capped", date(48 * time.Hour), callback.MaxRetryAfter},
			{"past date keeps the backoff", date(-time.Hour), 0},
			{"garbage keeps the backoff", "soon", 0},
		} {
			t.Run(fmt.Sprintf("%d %s", status, tc.name), func(t *testing.T) {
				t.Parallel()
				rcv := callbacktest.New(t, status, 200)
				rcv.Headers = map[string]string{"Retry-After": tc.value}
				d, waits := newRecordingDeliverer(t, callback.Options{Guard: callback.NewGuard(loopback), Attempts: 3,
					Now: func() time.Time { return now }})
				res := d.Deliver(context.Background(), callback.Delivery{URL: rcv.URL, MsgID: "m", Secret: "s", Body: []byte(`{}`)})
				if !res.Delivered || res.Attempts != 2 || len(*waits) != 1 {
					t.Fatalf("result %+v waits %v", res, *waits)
				}
				got := (*waits)[0]
				if tc.want > 0 && got != tc.want {
					t.Fatalf("waited %v, want %v", got, tc.want)
				}
				// Without a usable Retry-After: the first backoff (100 ms ±20 %).
				if tc.want == 0 && (got < 80*time.Millisecond || got > 120*time.Millisecond) {
					t.Fatalf("waited %v, want the backoff", got)
				}
			})
		}
	}
}

func TestStopsOn4xxAndGivesUp(t *testing.T) {
	t.Parallel()
	for _, tc := range []callbacktest.Refusal{
		{Name: "400 stops", Statuses: []int{400}, Requests: 1},
		{Name: "404 stops", Statuses: []int{404}, Requests: 1},
		{Name: "301 is a failure, not followed", Statuses: []int{301}, Requests: 1},
		{Name: "302 is a failure, not followed", Statuses: []int{302}, Requests: 1},
		{Name: "303 is a failure, not followed", Statuses: []int{303}, Requests: 1},
		{Name: "307 is a failure, not followed", Statuses: []int{307}, Requests: 1},
		{Name: "308 is a failure, not followed", Statuses: []int{308}, Requests: 1},
		{Name: "410 stops", Statuses: []int{410}, Requests: 1},
		{Name: "5xx gives up after schedule", Statuses: []int{500}, Requests: 4},
	} {
		t.Run(tc.Name, func(t *testing.T) {
			other := callbacktest.New(t, 200)
			rcv := callbacktest.New(t, tc.Statuses...)
			rcv.Headers = map[string]string{"Location": other.URL}
			d, _ := newDeliverer(t, loopback, 4)
			res := d.Deliver(context.Background(), callback.Delivery{URL: rcv.URL, MsgID: "m", Secret: "s", Body: []byte(`{}`)})
			if res.Delivered || res.Attempts != tc.Requests || len(rcv.Got()) != tc.Requests || res.Err == nil ||
				res.Status != tc.Statuses[0] {
				t.Fatalf("result = %+v, %d requests", res, len(rcv.Got()))
			}
			if len(other.Got()) != 0 {
				t.Fatal("redirect was followed")
			}
		})
	}
}

func TestNetworkErrorsRetried(t *testing.T) {
	t.Parallel()
	rcv := callbacktest.New(t, 200)
	url := rcv.URL
	rcv.Close() // connection refused
	d, waits := newDeliverer(t, loopback, 3)
	res := d.Deliver(context.Background(), callback.Delivery{URL: url, MsgID: "m", Secret: "s", Body: []byte(`{}`)})
	if res.Delivered || res.Attempts != 3 || len(*waits) != 2 {
		t.Fatalf("result %+v waits %v", res, *waits)
	}
}

func TestSSRFRefused(t *testing.T) {
	t.Parallel()
	rcv := callbacktest.New(t, 200) // on 127.0.0.1: refused when loopback is not allowed
	_, port, _ := splitPort(rcv.URL)
	d, waits := newDeliverer(t, nil, 5)
	for _, u := range []string{
		"http://169.254.169.254/latest/meta-data/",
		"http://10.0.0.1/hook",
		"http://192.168.1.10:8080/hook",
		"http://[::1]:" + port + "/",
		"http://[fd00::1]/",
		"http://[::ffff:127.0.0.1]:" + port + "/",
		"http://localhost:" + port + "/hook", // resolved, then refused at connect time
		rcv.URL,
	} {
		res := d.Deliver(context.Background(), callback.Delivery{URL: u, MsgID: "m", Secret: "s", Body: []byte(`{}`)})
		if res.Delivered || res.Attempts != 1 || !errors.Is(res.Err, callback.ErrRefused) {
			t.Errorf("%s: %+v", u, res)
		}
	}
	if len(rcv.Got()) != 0 || len(*waits) != 0 {
		t.Fatalf("refused targets were contacted or retried: %d, %v", len(rcv.Got()), *waits)
	}

	// The dialer hook itself refuses (what DNS rebinding would hit).
	hc := callback.NewHTTPClient(callback.NewGuard(nil), 5*time.Second)
	for _, u := range []string{"http://10.0.0.1:9/", "http://169.254.169.254/", "http://127.0.0.1:" + port + "/"} {
		_, err := hc.Get(u)
		if err == nil || !errors.Is(err, ssrf.ErrProhibitedIP) {
			t.Errorf("%s: %v", u, err)
		}
	}
}

func TestAllowedNets(t *testing.T) {
	t.Parallel()
	nets, err := callback.ParseAllowedNets("127.0.0.0/8, 10.1.0.0/16 fd00::/8 192.168.0.7")
	if err != nil || len(nets) != 4 || nets[3].String() != "192.168.0.7/32" {
		t.Fatalf("%v %v", nets, err)
	}
	if _, err := callback.ParseAllowedNets("not-a-cidr"); err == nil {
		t.Fatal("bad CIDR accepted")
	}
	g := callback.NewGuard(nets)
	for u, ok := range map[string]bool{
		"http://10.1.2.3/": true, "http://10.2.0.1/": false, "http://192.168.0.7/": true, "http://192.168.0.8/": false,
		"https://example.com/": true, "ftp://example.com/": false, "http://user:pw@example.com/": false, "http:///x": false,
	} {
		if err := callback.CheckURL(g, u); (err == nil) != ok {
			t.Errorf("CheckURL(%s) = %v", u, err)
		}
	}
}

func splitPort(u string) (string, string, error) {
	for i := len(u) - 1; i >= 0; i-- {
		if u[i] == ':' {
			return u[:i], u[i+1:], nil
		}
	}
	return u, "", errors.New("no port")
}

// 410 Gone stops the delivery and disables the endpoint: later deliveries
// to it (any query) make no attempt and report ErrEndpointGone, other
// endpoints are untouched, and one successful test message re-enables it.
func TestGoneDisablesEndpoint(t *testing.T) {
	t.Parallel()
	rcv := callbacktest.New(t, 410, 200)
	other := callbacktest.New(t, 200)
	d, waits := newDeliverer(t, loopback, 4)
	send := func(url string) callback.Result {
		return d.Deliver(context.Background(), callback.Delivery{URL: url, MsgID: "m", Secret: "s", Body: []byte(`{}`)})
	}
	if res := send(rcv.URL + "/hook?token=1"); res.Delivered || res.Attempts != 1 || res.Status != 410 ||
		!errors.Is(res.Err, callback.ErrEndpointGone) || len(*waits) != 0 {
		t.Fatalf("first delivery = %+v, waits %v", res, *waits)
	}
	if res := send(rcv.URL + "/hook?token=2"); res.Delivered || res.Attempts != 0 || !errors.Is(res.Err, callback.ErrEndpointGone) {
		t.Fatalf("delivery to a gone endpoint = %+v, want no attempt", res)
	}
	if n := len(rcv.Got()); n != 1 {
		t.Fatalf("the gone endpoint got %d requests, want 1", n)
	}
	if res := send(other.URL + "/hook"); !res.Delivered {
		t.Fatalf("another endpoint = %+v", res)
	}
	if rec := d.Once(context.Background(), callback.Delivery{URL: rcv.URL + "/hook", MsgID: "msg_test", Secret: "s",
		Kind: "test", Body: []byte(`{}`)}); rec.Status != 200 || rec.Outcome != "delivered" {
		t.Fatalf("test message = %+v", rec)
	}
	if res := send(rcv.URL + "/hook?token=3"); !res.Delivered || res.Attempts != 1 {
		t.Fatalf("after a successful test message = %+v, want delivered", res)
	}
}
