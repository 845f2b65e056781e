package upstream

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/catalog"
)

// An upstream's redirect is its answer: the client gets the 3xx, and the
// place it points to is never asked (neither the prompt nor the provider's
// key goes there).
func TestSendDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	var elsewhere atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/elsewhere" {
			elsewhere.Add(1)
			return
		}
		http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(srv.Close)
	for _, base := range []string{srv.URL, srv.URL + "/v1"} {
		resp, err := New(Options{}).Send(context.Background(), catalog.Provider{BaseURL: base, APIKey: "k"}, []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTemporaryRedirect {
			t.Errorf("%s: status %d, want the upstream's 307", base, resp.StatusCode)
		}
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the redirect's target was asked %d times, want 0", n)
	}
}
