package console_test

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/shared/wire"
)

// The channel page shows the attempt log by message with its final state
// and a Re-send button to members, a banner per failing endpoint with its
// last error, and the rotation overlap, which an owner can end.
func TestChannelPageDeliveryLog(t *testing.T) {
	t.Parallel()
	storetest.EachWith(t, newWorld, func(t *testing.T, w *world) {
		ctx := context.Background()
		old := "an-old-secret-of-16+"
		ch, err := w.st.SetChannel(ctx, w.projA.ID, &old, nil)
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now().UTC().Add(-3 * time.Hour)
		var rows []store.WebhookAttempt
		for i, status := range []int{503, 503, 500} {
			rows = append(rows, store.WebhookAttempt{ID: store.NewID("att"), ProjectID: w.projA.ID, ChannelID: ch.ID,
				CorrelationID: "cor_shown", WebhookID: "msg_shown", Kind: wire.AttemptDelivery, Attempt: i + 1,
				URL: "https://hooks.example/cb", Endpoint: "https://hooks.example/cb", AttemptedAt: t0.Add(time.Duration(i) * time.Hour),
				StatusCode: status, ResponseHead: "upstream overloaded", Outcome: wire.AttemptFailed})
		}
		if _, _, err := w.st.RecordWebhookAttempts(ctx, rows, time.Hour, time.Now()); err != nil {
			t.Fatal(err)
		}
		if _, _, err := w.st.PutOutbox(ctx, store.OutboxMessage{ProjectID: w.projA.ID, ChannelID: ch.ID, CorrelationID: "cor_shown", Reply: "r"}); err != nil {
			t.Fatal(err)
		}
		page := "/console/w/" + w.wsA.ID + "/projects/" + w.projA.ID + "/channel"

		m := w.browser(t)
		m.signIn(w.member)
		r := m.get(page)
		for _, want := range []string{`data-correlation="cor_shown"`, "state-" + wire.MessageInOutbox, "upstream overloaded",
			`class="replay"`, `id="failing-endpoint"`, "answered 500"} {
			if !strings.Contains(r.body, want) {
				t.Fatalf("the channel page lacks %q", want)
			}
		}
		// A member may re-send; with no runtime here the answer says why it was not sent.
		tok := m.csrf(page)
		rr := m.do(http.MethodPost, page+"/replay/cor_shown", url.Values{"csrf": {tok}}, nil)
		if rr.status == http.StatusForbidden || !strings.Contains(rr.body, "Not sent") {
			t.Fatalf("member re-send: %d %.500s", rr.status, rr.body)
		}

		// The banner's test message goes only to an endpoint the log knows.
		tr := m.do(http.MethodPost, page+"/endpoint-test", url.Values{"csrf": {tok}, "url": {"https://elsewhere.example/"}}, nil)
		if tr.status != http.StatusBadRequest || !strings.Contains(tr.body, "only to an endpoint") {
			t.Fatalf("test message to an unknown URL: %d %.300s", tr.status, tr.body)
		}
		tr = m.do(http.MethodPost, page+"/endpoint-test", url.Values{"csrf": {tok}, "url": {"https://hooks.example/cb"}}, nil)
		if tr.status == http.StatusBadRequest || !strings.Contains(tr.body, "Not sent") {
			t.Fatalf("test message to the failing endpoint (no runtime here): %d %.300s", tr.status, tr.body)
		}

		o := w.browser(t)
		o.signIn(w.owner)
		tok = o.csrf(page)
		r = o.do(http.MethodPost, page+"/secret", url.Values{"csrf": {tok}, "action": {"rotate"}, "overlap": {"168h"}}, nil)
		got, _ := w.st.GetChannel(ctx, w.projA.ID)
		if r.status != 200 || !strings.Contains(r.body, `id="previous-secret"`) || got.PreviousSecret != old ||
			got.PreviousSecretExpiresAt == nil || time.Until(*got.PreviousSecretExpiresAt) < 6*24*time.Hour {
			t.Fatalf("rotate with a 7-day overlap: %d, stored %+v", r.status, got)
		}
		if r := o.do(http.MethodPost, page+"/secret", url.Values{"csrf": {tok}, "action": {"rotate"}, "overlap": {"99h"}}, nil); r.status != 400 {
			t.Fatalf("an overlap not offered: %d", r.status)
		}
		r = o.do(http.MethodPost, page+"/secret", url.Values{"csrf": {tok}, "action": {"drop-old"}}, nil)
		got, _ = w.st.GetChannel(ctx, w.projA.ID)
		if r.status != 200 || strings.Contains(r.body, `id="previous-secret"`) || got.PreviousSecret != "" {
			t.Fatalf("drop the old secret: %d, stored %+v", r.status, got)
		}
		if r := m.do(http.MethodPost, page+"/secret", url.Values{"csrf": {m.csrf(page)}, "action": {"drop-old"}}, nil); r.status != http.StatusForbidden {
			t.Fatalf("a member dropping the old secret: %d", r.status)
		}
	})
}

// One 410 Gone answer shows the failing banner at once, and a channel with
// an ed25519 signing key shows its public half, never the private one.
func TestChannelPageGoneAndPublicKey(t *testing.T) {
	t.Parallel()
	storetest.EachWith(t, newWorld, func(t *testing.T, w *world) {
		ctx := context.Background()
		secret := "a-channel-secret-of-16+"
		ch, err := w.st.SetChannel(ctx, w.projA.ID, &secret, nil)
		if err != nil {
			t.Fatal(err)
		}
		gone := store.WebhookAttempt{ID: store.NewID("att"), ProjectID: w.projA.ID, ChannelID: ch.ID, CorrelationID: "cor_gone",
			WebhookID: "msg_gone", Kind: wire.AttemptDelivery, Attempt: 1, URL: "https://hooks.example/gone",
			Endpoint: "https://hooks.example/gone", AttemptedAt: time.Now().UTC(), StatusCode: 410,
			Error: "callback endpoint is gone (410): callback answered 410", Outcome: wire.AttemptFailed}
		if _, _, err := w.st.RecordWebhookAttempts(ctx, []store.WebhookAttempt{gone}, 120*time.Hour, time.Now()); err != nil {
			t.Fatal(err)
		}
		sk, err := wire.NewWebhookSigningKey()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.st.SetChannelSigningKey(ctx, w.projA.ID, sk); err != nil {
			t.Fatal(err)
		}
		pk, _ := wire.WebhookPublicKey(sk)
		m := w.browser(t)
		m.signIn(w.member)
		r := m.get("/console/w/" + w.wsA.ID + "/projects/" + w.projA.ID + "/channel")
		body := html.UnescapeString(r.body)
		for _, want := range []string{`id="failing-endpoint"`, "https://hooks.example/gone", "gone (410)", `id="signing-public-key"`, pk} {
			if !strings.Contains(body, want) {
				t.Fatalf("the channel page lacks %q", want)
			}
		}
		if strings.Contains(body, strings.TrimPrefix(sk, "whsk_")) {
			t.Fatal("the channel page shows the private signing key")
		}
	})
}

// The channel page's range replay form: a member replays the delivered
// replies of a range; the API sends them itself, through its SSRF guard
// (a loopback callback URL is refused and the refusal is an attempt of
// kind replay in the log); a state that is not offered is refused.
func TestChannelPageReplayRange(t *testing.T) {
	t.Parallel()
	storetest.EachWith(t, newWorld, func(t *testing.T, w *world) {
		ctx := context.Background()
		secret := "a-channel-secret-of-16+"
		ch, err := w.st.SetChannel(ctx, w.projA.ID, &secret, nil)
		if err != nil {
			t.Fatal(err)
		}
		at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		if _, _, err := w.st.PutOutbox(ctx, store.OutboxMessage{ProjectID: w.projA.ID, ChannelID: ch.ID, CorrelationID: "cor_rr",
			Reply: "r", CreatedAt: at, Status: wire.OutboxStatusDelivered}); err != nil {
			t.Fatal(err)
		}
		first := store.WebhookAttempt{ID: store.NewID("att"), ProjectID: w.projA.ID, ChannelID: ch.ID, CorrelationID: "cor_rr",
			WebhookID: "msg_rr", Kind: wire.AttemptDelivery, Attempt: 1, URL: "http://127.0.0.1:1/cb",
			Endpoint: "http://127.0.0.1:1/cb", AttemptedAt: at, StatusCode: 200, Outcome: wire.AttemptDelivered}
		if _, _, err := w.st.RecordWebhookAttempts(ctx, []store.WebhookAttempt{first}, time.Hour, at); err != nil {
			t.Fatal(err)
		}
		page := "/console/w/" + w.wsA.ID + "/projects/" + w.projA.ID + "/channel"
		m := w.browser(t)
		m.signIn(w.member)
		if r := m.get(page); !strings.Contains(r.body, `id="replay-range"`) {
			t.Fatal("the channel page has no range replay form")
		}
		tok := m.csrf(page)
		r := m.do(http.MethodPost, page+"/replay-range", url.Values{"csrf": {tok}, "since": {"2026-03-01T00:00"},
			"until": {"2026-03-02T00:00"}, "status": {"delivered"}}, nil)
		if r.status != http.StatusAccepted || !strings.Contains(r.body, "Replaying 1 messages") {
			t.Fatalf("replay a range: %d %.500s", r.status, r.body)
		}
		w.srv.Recovery.Wait()
		rows, err := w.st.ListWebhookAttempts(ctx, w.projA.ID, "cor_rr", nil, 10)
		if err != nil || len(rows) != 2 || rows[0].Kind != wire.AttemptReplay || rows[0].WebhookID != "msg_rr" ||
			!strings.Contains(rows[0].Error, "refused") {
			t.Fatalf("the replay's attempt: %+v %v", rows, err)
		}
		if r := m.do(http.MethodPost, page+"/replay-range", url.Values{"csrf": {tok}, "status": {"failed"}}, nil); r.status != http.StatusBadRequest {
			t.Fatalf("a state not offered: %d", r.status)
		}
	})
}
