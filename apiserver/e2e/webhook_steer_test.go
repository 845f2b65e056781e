package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	svix "github.com/svix/svix-webhooks/go"

	"github.com/svc-dev/svc/shared/wire"
)

// received is one callback the steer receiver got.
type received struct {
	header http.Header
	body   []byte
	status int
}

// steerReceiver answers the status it is set to and hands every request over.
func steerReceiver(t *testing.T, status *atomic.Int32) (*httptest.Server, chan received) {
	got := make(chan received, 100)
	s := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		st := int(status.Load())
		rw.WriteHeader(st)
		_, _ = rw.Write([]byte("status " + http.StatusText(st)))
		got <- received{r.Header.Clone(), b, st}
	}))
	t.Cleanup(s.Close)
	return s, got
}

// attemptsOf polls the attempt log until it holds want attempts of corr
// (the pod hands them over in the background).
func attemptsOf(t *testing.T, w *proxyWorld, h http.Header, corr string, want int) []wire.WebhookAttempt {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, body := w.do(t, http.MethodGet, "/agent/channels/webhook/attempts?correlationId="+corr, nil, h)
		var l wire.WebhookAttemptList
		if res.StatusCode != 200 || json.Unmarshal(body, &l) != nil {
			t.Fatalf("attempts: %d %s", res.StatusCode, body)
		}
		if len(l.Attempts) >= want || time.Now().After(deadline) {
			if len(l.Attempts) != want {
				t.Fatalf("attempts of %s: %s, want %d", corr, body, want)
			}
			return l.Attempts
		}
		time.Sleep(50 * time.Millisecond) // poll with a deadline
	}
}

// eventually polls cond (with a deadline) until it holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
		time.Sleep(50 * time.Millisecond) // poll with a deadline
	}
}

// activityStatus is the pod's answer to the activity route with h's secret:
// it shows which secrets the pod's cached channel config accepts.
func activityStatus(t *testing.T, w *proxyWorld, h http.Header) int {
	res, _ := w.do(t, http.MethodGet, "/agent/channels/webhook/activity", nil, h)
	return res.StatusCode
}

func sendAsync(t *testing.T, w *proxyWorld, h http.Header, msg, url string) string {
	t.Helper()
	res, body := w.do(t, http.MethodPost, "/agent/channels/webhook/incoming",
		[]byte(`{"message":"`+msg+`","callbackUrl":"`+url+`"}`), h)
	var acc wire.WebhookAccepted
	if res.StatusCode != http.StatusAccepted || json.Unmarshal(body, &acc) != nil {
		t.Fatalf("incoming %s: %d %s", msg, res.StatusCode, body)
	}
	return acc.CorrelationID
}

// Through the real API and pod: the attempt log shows a retried
// delivery with its final state; a member re-sends it with the same
// webhook-id; a rotation keeps the old secret valid (both signatures, each
// verified by svix's library knowing one secret) until it is dropped; an
// endpoint failing for the period is marked failing (outbox, metric), and a
// test message re-enables it.
func TestWebhookDeliveryLogReplayRotationAndHealth(t *testing.T) {
	t.Parallel()
	w, channelID := webhookWorld(t, "SVC_POD_CALLBACK_MAX_ATTEMPTS=3", "SVC_WEBHOOK_FAILING_AFTER=10ms")
	w.e.upstream.Script(agentScript("steer.txt", "s", "steered", nil))
	var status atomic.Int32
	status.Store(503)
	recv, got := steerReceiver(t, &status)
	h := hookHeaders()

	// 1. A retried delivery in the log: 503 (with the next retry), then 204.
	corr := sendAsync(t, w, h, "one", recv.URL+"/cb")
	first := await(t, got, "no first attempt")
	status.Store(204)
	second := await(t, got, "no second attempt")
	if first.status != 503 || second.status != 204 || first.header.Get("webhook-id") != second.header.Get("webhook-id") {
		t.Fatalf("attempts %d then %d", first.status, second.status)
	}
	as := attemptsOf(t, w, h, corr, 2)
	if as[0].Outcome != wire.AttemptDelivered || as[0].Status != 204 || as[1].Status != 503 || as[1].NextRetryAt.IsZero() ||
		!strings.Contains(as[1].ResponseHead, "Service Unavailable") {
		t.Fatalf("log = %+v", as)
	}
	deadline := time.Now().Add(30 * time.Second)
	for as[0].MessageState != wire.MessageDelivered && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond) // the delivery notice reaches the API in the background
		as = attemptsOf(t, w, h, corr, 2)
	}
	if as[0].MessageState != wire.MessageDelivered {
		t.Fatalf("final state %q, want delivered", as[0].MessageState)
	}

	// 2. Replay: the same webhook-id and body, a fresh signature, logged.
	res, body := w.do(t, http.MethodPost, "/agent/channels/webhook/replay/"+corr, nil, h)
	var rep wire.WebhookAttempt
	if res.StatusCode != 200 || json.Unmarshal(body, &rep) != nil || rep.Kind != wire.AttemptReplay || rep.Outcome != wire.AttemptDelivered {
		t.Fatalf("replay: %d %s", res.StatusCode, body)
	}
	again := await(t, got, "the replay never came")
	if again.header.Get("webhook-id") != second.header.Get("webhook-id") || string(again.body) != string(second.body) {
		t.Fatalf("replayed %s %s, want %s %s", again.header.Get("webhook-id"), again.body, second.header.Get("webhook-id"), second.body)
	}
	attemptsOf(t, w, h, corr, 3)

	// 3. Rotation with an overlap: both secrets accepted, both signatures.
	rot := w.e.admin("channel", "rotate-secret", "--project", w.project, "--overlap", "1h")
	newSecret, _ := rot["secret"].(string)
	newH := http.Header{"X-Webhook-Secret": {newSecret}, "Content-Type": {"application/json"}}
	eventually(t, "the pod never took the new secret", func() bool { return activityStatus(t, w, newH) == 200 })
	sendAsync(t, w, h, "old secret still accepted", recv.URL+"/cb")
	cb := await(t, got, "no callback during the overlap")
	sendAsync(t, w, newH, "new secret accepted", recv.URL+"/cb")
	await(t, got, "no callback with the new secret")
	if n := len(strings.Fields(cb.header.Get("webhook-signature"))); n != 2 {
		t.Fatalf("webhook-signature %q, want two entries", cb.header.Get("webhook-signature"))
	}
	oldV, _ := svix.NewWebhookRaw([]byte("hook-secret")) // a raw (non-whsec) secret is its bytes
	newV, err := svix.NewWebhook(newSecret)
	must(t, err)
	if err := oldV.Verify(cb.body, cb.header); err != nil {
		t.Fatalf("a receiver knowing only the old secret: %v", err)
	}
	if err := newV.Verify(cb.body, cb.header); err != nil {
		t.Fatalf("a receiver knowing only the new secret: %v", err)
	}
	w.e.admin("channel", "drop-old-secret", "--project", w.project)
	eventually(t, "the pod still accepts the dropped secret", func() bool { return activityStatus(t, w, h) == 401 })
	if res, _ := w.do(t, http.MethodPost, "/agent/channels/webhook/incoming", []byte(`{"message":"x"}`), h); res.StatusCode != 401 {
		t.Fatalf("old secret after the drop: %d", res.StatusCode)
	}

	// 4. Every attempt fails for longer than the period: failing.
	status.Store(500)
	failed := sendAsync(t, w, newH, "to a broken endpoint", recv.URL+"/cb")
	for range 3 {
		await(t, got, "no attempt to the broken endpoint")
	}
	attemptsOf(t, w, newH, failed, 3)
	var eps struct {
		Endpoints []wire.WebhookEndpointHealth `json:"endpoints"`
	}
	res, body = w.do(t, http.MethodGet, "/agent/channels/webhook/endpoints", nil, newH)
	if res.StatusCode != 200 || json.Unmarshal(body, &eps) != nil || len(eps.Endpoints) != 1 || !eps.Endpoints[0].Failing ||
		!strings.Contains(eps.Endpoints[0].LastError, "500") {
		t.Fatalf("endpoints: %d %s", res.StatusCode, body)
	}
	mres, err := http.Get(w.api.URL + "/metrics")
	must(t, err)
	metrics, _ := io.ReadAll(mres.Body)
	mres.Body.Close()
	if !strings.Contains(string(metrics), "svc_webhook_endpoint_failing_total 1") {
		t.Fatal("svc_webhook_endpoint_failing_total is not 1")
	}
	// A probe: once a test message to another (healthy) endpoint carries a
	// header set after the endpoint failed, the pod's config knows it failed.
	w.e.admin("channel", "set", "--project", w.project, "--callback-headers", `{"X-Team":"after-failing"}`)
	var probeStatus atomic.Int32
	probeStatus.Store(200)
	probe, probed := steerReceiver(t, &probeStatus)
	eventually(t, "the pod's config never showed the failing endpoint", func() bool {
		res, _ := w.do(t, http.MethodPost, "/agent/channels/webhook/endpoints/test", []byte(`{"callbackUrl":"`+probe.URL+`/probe"}`), newH)
		return res.StatusCode == 200 && (<-probed).header.Get("X-Team") == "after-failing"
	})
	skipped := sendAsync(t, w, newH, "straight to the outbox", recv.URL+"/cb")
	res, body = w.do(t, http.MethodGet, "/agent/channels/webhook/outbox/"+channelID+"?wait=20&limit=10", nil, newH)
	var ob wire.OutboxResponse
	must(t, json.Unmarshal(body, &ob))
	ids := map[string]bool{}
	for _, m := range ob.Messages {
		ids[m.CorrelationID] = true
	}
	for !ids[skipped] && res.StatusCode == 200 {
		res, body = w.do(t, http.MethodGet, "/agent/channels/webhook/outbox/"+channelID+"?wait=20&limit=10", nil, newH)
		ob = wire.OutboxResponse{}
		must(t, json.Unmarshal(body, &ob))
		if len(ob.Messages) == 0 {
			t.Fatal("the message for the failing endpoint never reached the outbox")
		}
		for _, m := range ob.Messages {
			ids[m.CorrelationID] = true
		}
	}
	if !ids[failed] || !ids[skipped] || len(got) != 0 {
		t.Fatalf("outbox %v (want %s and %s); %d extra callbacks", ids, failed, skipped, len(got))
	}

	// 5. A successful test message re-enables the endpoint.
	status.Store(200)
	res, body = w.do(t, http.MethodPost, "/agent/channels/webhook/endpoints/test", []byte(`{"callbackUrl":"`+recv.URL+`/cb"}`), newH)
	var ta wire.WebhookAttempt
	if res.StatusCode != 200 || json.Unmarshal(body, &ta) != nil || ta.Outcome != wire.AttemptDelivered || ta.Kind != wire.AttemptTest {
		t.Fatalf("test message: %d %s", res.StatusCode, body)
	}
	await(t, got, "the test message never came")
	res, body = w.do(t, http.MethodGet, "/agent/channels/webhook/endpoints", nil, newH)
	eps.Endpoints = nil
	if res.StatusCode != 200 || json.Unmarshal(body, &eps) != nil || len(eps.Endpoints) != 0 {
		t.Fatalf("endpoints after the test message: %d %s", res.StatusCode, body)
	}
}
