package host

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"
)

// The guest's relay forwards its own project's internal routes to the API
// and refuses everything else (other projects, anything outside /internal).
func TestRelayOnlyForwardsTheProjectsInternalRoutes(t *testing.T) {
	t.Parallel()
	var seen []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "api")
	}))
	defer api.Close()
	rl, err := newRelay(api.URL, "prj_1", zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer rl.close()
	cases := []struct {
		path   string
		status int
	}{
		{"/internal/projects/prj_1/checkpoints/record", 200},
		{"/internal/projects/prj_1/chat/completions", 200},
		{"/internal/projects/prj_2/checkpoints/record", 403},
		{"/internal/projects/prj_1", 403},
		{"/internal/projects/prj_1/../prj_2/channel", 403},
		{"/api/v1/models", 403},
		{"/", 403},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(http.MethodPost, "http://"+rl.addr()+c.path, strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer rt")
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
	if len(seen) != 2 || seen[0] != "POST /internal/projects/prj_1/checkpoints/record Bearer rt" {
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
