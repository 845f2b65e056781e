package callback_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	svix "github.com/svix/svix-webhooks/go"

	"github.com/svc-dev/svc/podagent/internal/callback"
	"github.com/svc-dev/svc/shared/wire"
)

// memRecorder keeps the records it is told.
type memRecorder struct {
	mu  sync.Mutex
	got []wire.WebhookAttempt
}

func (m *memRecorder) Record(a wire.WebhookAttempt) {
	m.mu.Lock()
	m.got = append(m.got, a)
	m.mu.Unlock()
}

func (m *memRecorder) all() []wire.WebhookAttempt {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]wire.WebhookAttempt(nil), m.got...)
}

// answering is a receiver that answers each request with the next of
// statuses (the last repeats) and body.
func answering(t *testing.T, body string, statuses ...int) *httptest.Server {
	var mu sync.Mutex
	n := 0
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		st := statuses[min(n, len(statuses)-1)]
		n++
		mu.Unlock()
		w.WriteHeader(st)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(s.Close)
	return s
}

// Every attempt is recorded: time, status, latency, the first 256 bytes of
// the answer, and when the next try goes; the last says delivered or
// failed, and all carry the message's webhook-id.
func TestEveryAttemptIsRecorded(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 200) // 400 bytes: cut at 256
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	cases := []struct {
		name     string
		url      func(t *testing.T) string
		attempts int
		want     []wire.WebhookAttempt // Status, Outcome, ResponseHead; NextRetryAt set when Outcome is retrying
		errText  string
	}{
		{"retried then delivered", func(t *testing.T) string { return answering(t, long, 503, 503, 200).URL + "/cb?x=1" }, 5,
			[]wire.WebhookAttempt{{Status: 503, Outcome: wire.AttemptRetrying}, {Status: 503, Outcome: wire.AttemptRetrying},
				{Status: 200, Outcome: wire.AttemptDelivered}}, ""},
		{"permanent refusal", func(t *testing.T) string { return answering(t, "gone", 410).URL }, 5,
			[]wire.WebhookAttempt{{Status: 410, Outcome: wire.AttemptFailed, ResponseHead: "gone"}}, "callback answered 410"},
		{"network error until the schedule ends", func(t *testing.T) string { return closed.URL }, 2,
			[]wire.WebhookAttempt{{Outcome: wire.AttemptRetrying}, {Outcome: wire.AttemptFailed}}, "connect"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := &memRecorder{}
			d, _ := newRecordingDeliverer(t, callback.Options{Guard: callback.NewGuard(loopback), Attempts: tc.attempts, Recorder: rec})
			url := tc.url(t)
			d.Deliver(context.Background(), callback.Delivery{URL: url, MsgID: "msg_1", Secret: "s", Body: []byte(`{}`),
				CorrelationID: "cor_1", ChannelID: "ch_1"})
			got := rec.all()
			if len(got) != len(tc.want) {
				t.Fatalf("%d records, want %d: %+v", len(got), len(tc.want), got)
			}
			ids := map[string]bool{}
			for i, g := range got {
				w := tc.want[i]
				ids[g.ID] = true
				if g.Status != w.Status || g.Outcome != w.Outcome || g.Attempt != i+1 || g.WebhookID != "msg_1" ||
					g.CorrelationID != "cor_1" || g.ChannelID != "ch_1" || g.Kind != wire.AttemptDelivery ||
					g.URL != url || g.Endpoint != wire.WebhookEndpoint(url) || g.AttemptedAt.IsZero() || g.LatencyMS < 0 {
					t.Fatalf("record %d = %+v, want %+v", i, g, w)
				}
				if (g.Outcome == wire.AttemptRetrying) != g.NextRetryAt.After(g.AttemptedAt) {
					t.Fatalf("record %d: next retry %v after %v (outcome %s)", i, g.NextRetryAt, g.AttemptedAt, g.Outcome)
				}
				if w.ResponseHead != "" && g.ResponseHead != w.ResponseHead {
					t.Fatalf("record %d: head %q", i, g.ResponseHead)
				}
				if g.Status >= 500 && (len(g.ResponseHead) != wire.AttemptHeadBytes || !strings.HasPrefix(long, g.ResponseHead)) {
					t.Fatalf("record %d: head of %d bytes, want the first %d of the answer", i, len(g.ResponseHead), wire.AttemptHeadBytes)
				}
			}
			if len(ids) != len(got) {
				t.Fatal("attempt ids repeat")
			}
			if last := got[len(got)-1]; tc.errText != "" && !strings.Contains(last.Error, tc.errText) {
				t.Fatalf("last error %q, want it to mention %q", last.Error, tc.errText)
			}
		})
	}
}

func whsec(t *testing.T) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

// During a rotation's overlap every callback carries one signature per
// secret, space-separated, so a receiver that knows only the old secret or
// only the new one verifies it with an independent Standard Webhooks
// verifier (svix's library, which we did not write); a receiver that knows
// neither does not.
func TestRotationSignsWithBothSecrets(t *testing.T) {
	t.Parallel()
	oldSecret, newSecret, stranger := whsec(t), whsec(t), whsec(t)
	var mu sync.Mutex
	var got *http.Request
	var body []byte
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := make([]byte, 1<<10)
		n, _ := r.Body.Read(b)
		mu.Lock()
		got, body = r, b[:n]
		mu.Unlock()
	}))
	t.Cleanup(rcv.Close)
	d, _ := newDeliverer(t, loopback, 1)
	payload := []byte(`{"reply":"hi","correlationId":"cor_1","metadata":{}}`)
	res := d.Deliver(context.Background(), callback.Delivery{URL: rcv.URL, MsgID: "msg_rot", Secret: newSecret,
		OldSecrets: []string{oldSecret}, Body: payload})
	if !res.Delivered {
		t.Fatalf("not delivered: %+v", res)
	}
	mu.Lock()
	h, b := got.Header, body
	mu.Unlock()
	if sigs := strings.Fields(h.Get(callback.HeaderSignature)); len(sigs) != 2 {
		t.Fatalf("webhook-signature %q, want two space-separated entries", h.Get(callback.HeaderSignature))
	}
	for _, tc := range []struct {
		name     string
		secret   string
		verifies bool
	}{{"knows only the old secret", oldSecret, true}, {"knows only the new secret", newSecret, true},
		{"knows neither", stranger, false}} {
		wh, err := svix.NewWebhook(tc.secret)
		if err != nil {
			t.Fatal(err)
		}
		if err := wh.Verify(b, h); (err == nil) != tc.verifies {
			t.Errorf("%s: svix Verify = %v", tc.name, err)
		}
	}
	// After the overlap: one signature, the old secret no longer verifies.
	d.Deliver(context.Background(), callback.Delivery{URL: rcv.URL, MsgID: "msg_rot2", Secret: newSecret, Body: payload})
	mu.Lock()
	h, b = got.Header, body
	mu.Unlock()
	wh, _ := svix.NewWebhook(oldSecret)
	if strings.Contains(h.Get(callback.HeaderSignature), " ") || wh.Verify(b, h) == nil {
		t.Fatalf("after the overlap the old secret still verifies: %q", h.Get(callback.HeaderSignature))
	}
}

// An attempt cut off by its context (the pod's shutdown) after its request
// reached the receiver is in the log, as retrying with ErrCutOff (the API's
// queue makes the next attempt), so the log counts what the receiver saw;
// one cut off before anything was sent is not.
func TestCutOffAttemptIsRecordedOnceSent(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release // never answers while the deliverer waits
	}))
	t.Cleanup(func() { close(release); hanging.Close() })

	cases := []struct {
		name string
		cut  func(cancel context.CancelFunc) // when the context ends
		want []string                        // outcomes recorded
	}{
		{"after the receiver got the request", func(cancel context.CancelFunc) { <-arrived; cancel() }, []string{wire.AttemptRetrying}},
		{"before anything was sent", func(cancel context.CancelFunc) { cancel() }, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &memRecorder{}
			d, _ := newRecordingDeliverer(t, callback.Options{Guard: callback.NewGuard(loopback), Attempts: 5, Recorder: rec})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan callback.Result, 1)
			if tc.want == nil {
				tc.cut(cancel)
			}
			go func() {
				done <- d.Deliver(ctx, callback.Delivery{URL: hanging.URL + "/cb", MsgID: "msg_1", Secret: "s",
					Body: []byte(`{}`), CorrelationID: "cor_1", ChannelID: "ch_1"})
			}()
			if tc.want != nil {
				tc.cut(cancel)
			}
			res := <-done
			if res.Delivered || res.Attempts != 1 || !errors.Is(res.Err, context.Canceled) {
				t.Fatalf("result %+v, want one undelivered attempt ended by the context", res)
			}
			got := rec.all()
			if len(got) != len(tc.want) {
				t.Fatalf("%d records, want %d: %+v", len(got), len(tc.want), got)
			}
			for i, g := range got {
				if g.Outcome != tc.want[i] || g.Status != 0 || g.Attempt != 1 || g.Error != callback.ErrCutOff.Error() ||
					!g.NextRetryAt.IsZero() || g.WebhookID != "msg_1" {
					t.Fatalf("record %d = %+v, want %s with the cut-off error and no retry time", i, g, tc.want[i])
				}
			}
		})
	}
}
