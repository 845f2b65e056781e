package internalapi_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/wire"
)

// A readiness answer counts only from the expected project's pod: another
// project's pod at the address (a reused port or pod IP) is a WrongPodError,
// never ready.
func TestPodReadyChecksIdentity(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, body, project string
		gen                 int64
		wrong, fails        bool
	}{
		{name: "no identity expected", body: `{"status":"ready"}`},
		{name: "its own pod", body: `{"status":"ready","projectId":"p1","generation":3}`, project: "p1", gen: 3},
		{name: "any generation", body: `{"status":"ready","projectId":"p1","generation":3}`, project: "p1"},
		{name: "another project's pod", body: `{"status":"ready","projectId":"p2"}`, project: "p1", wrong: true, fails: true},
		{name: "an older generation", body: `{"status":"ready","projectId":"p1","generation":2}`, project: "p1", gen: 3, wrong: true, fails: true},
		{name: "a pod that names nobody", body: `{"status":"ready"}`, project: "p1", wrong: true, fails: true},
		{name: "not a readiness answer", body: `ok`, project: "p1", fails: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			err := (&internalapi.PodClient{BaseURL: srv.URL, ProjectID: tc.project, Generation: tc.gen}).Ready(context.Background())
			var wrong *wire.WrongPodError
			if (err != nil) != tc.fails || errors.As(err, &wrong) != tc.wrong {
				t.Fatalf("Ready = %v, want failure %v (wrong pod %v)", err, tc.fails, tc.wrong)
			}
		})
	}
}
