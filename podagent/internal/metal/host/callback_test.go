package host_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/podagent/internal/agentloop/fakegateway"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/wire"
)

// callbackReceiver is the test's callback URL on the host's loopback.
type callbackReceiver struct {
	*httptest.Server
	got chan receivedCallback
}

type receivedCallback struct {
	header http.Header
	body   []byte
}

func newCallbackReceiver(t testing.TB) *callbackReceiver {
	r := &callbackReceiver{got: make(chan receivedCallback, 8)}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.got <- receivedCallback{req.Header.Clone(), b}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *callbackReceiver) wait(t testing.TB) receivedCallback {
	t.Helper()
	select {
	case c := <-r.got:
		return c
	case <-time.After(3 * time.Minute):
		t.Fatal("no callback reached the receiver")
		return receivedCallback{}
	}
}

// postIncoming posts body to the guest's webhook channel with the project's
// runtime token and the channel secret.
func postIncoming(t testing.TB, st wire.MetalProject, token, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, st.URL+internalapi.PodWebhookIncoming, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set(wire.HeaderWebhookSecret, "sec")
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// asyncTurn sends an async webhook message (callbackUrl set) whose agent
// replies reply; it returns the correlation id of the 202.
func (w *world) asyncTurn(t testing.TB, st wire.MetalProject, token, callbackURL, reply string) string {
	t.Helper()
	w.gw.Sequence(fakegateway.Reply{Text: reply})
	body, _ := json.Marshal(map[string]any{"message": "say " + reply, "callbackUrl": callbackURL, "metadata": map[string]string{"k": "v"}})
	res := postIncoming(t, st, token, string(body))
	defer res.Body.Close()
	var acc wire.WebhookAccepted
	if err := json.NewDecoder(res.Body).Decode(&acc); err != nil || res.StatusCode != http.StatusAccepted || acc.CorrelationID == "" {
		t.Fatalf("async message: %d %+v %v", res.StatusCode, acc, err)
	}
	return acc.CorrelationID
}

// waitOutbox waits until the guest handed corr's reply to the API's outbox
// (through the relay).
func (w *world) waitOutbox(t testing.TB, corr string) wire.OutboxPut {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		if put, ok := w.gw.Outbox()[corr]; ok {
			return put
		}
		if time.Now().After(deadline) {
			break
		}
	}
	t.Fatalf("the reply of %s never reached the outbox: %v", corr, w.gw.Outbox())
	return wire.OutboxPut{}
}
