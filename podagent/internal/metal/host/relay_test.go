package host

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/podagent/internal/callback"
	"github.com/svc-dev/svc/podagent/internal/metal/guest"
)

// The guest's relay forwards its own project's internal routes to the API
// and refuses everything else (other projects, anything outside /internal);
// callbacks leave through its forwarder, under the host's SSRF guard.
func TestRelayOnlyForwardsTheProjectsInternalRoutes(t *testing.T) {
	t.Parallel()
	var seen []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization")+r.Header.Get(callback.HeaderForwardToken))
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "api")
	}))
	defer api.Close()
	fwd := callback.NewForwarder(callback.NewGuard([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}), 0, zaptest.NewLogger(t))
	rl, err := newRelay(relayConfig{apiURL: api.URL, projectID: "prj_1", token: "rt-prj-1", callbacks: fwd}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer rl.close()
	cases := []struct {
		path, target, token string
		status              int
	}{
		{guest.CallbackForwardPath, api.URL + "/hook", "rt-prj-1", 200},
		{guest.CallbackForwardPath, "http://169.254.169.254/latest/meta-data/", "rt-prj-1", 403},
		// only the project's own guest may send through the forwarder
		{guest.CallbackForwardPath, api.URL + "/hook", "", 401},
		{guest.CallbackForwardPath, api.URL + "/hook", "rt-prj-2", 401},
		{"/internal/projects/prj_1/checkpoints/record", "", "", 200},
		{"/internal/projects/prj_1/chat/completions", "", "", 200},
		{"/internal/projects/prj_2/checkpoints/record", "", "", 403},
		{"/internal/projects/prj_1", "", "", 403},
		{"/internal/projects/prj_1/../prj_2/channel", "", "", 403},
		{"/api/v1/models", "", "", 403},
		{"/", "", "", 403},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(http.MethodPost, "http://"+rl.addr()+c.path, strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer rt")
		if c.target != "" {
			req.Header.Set(callback.HeaderForwardTarget, c.target)
		}
		if c.token != "" {
			req.Header.Set(callback.HeaderForwardToken, c.token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != c.status {
			t.Errorf("%s: %d %s, want %d", c.path, res.StatusCode, b, c.status)
		}
	}
	// The receiver never sees the forwarder's token.
	if len(seen) != 3 || seen[0] != "POST /hook Bearer rt" || seen[1] != "POST /internal/projects/prj_1/checkpoints/record Bearer rt" {
		t.Fatalf("the API saw %q", seen)
	}
}

func TestValidProjectID(t *testing.T) {
	t.Parallel()
	for id, ok := range map[string]bool{"prj_1": true, "a-B_9": true, "": false, "../x": false, "a/b": false,
		"a b": false, strings.Repeat("a", 129): false} {
		if err := ValidProjectID(id); (err == nil) != ok {
			t.Errorf("ValidProjectID(%q) = %v", id, err)
		}
	}
}
