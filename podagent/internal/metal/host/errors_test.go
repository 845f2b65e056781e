package host

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	fsstore "github.com/svc-dev/svc/shared/objstore/fs"
	"github.com/svc-dev/svc/shared/wire"
)

// The host answers its errors as both binaries do: the
// envelope of a code declared in wire.Codes, with that code's status and
// type — on its control API and on the guest's large-file relay.
func TestHostErrorsAreTheEnvelope(t *testing.T) {
	t.Parallel()
	store, err := fsstore.New(t.TempDir(), fsstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	api := (&Host{}).Handler("host-token", prometheus.NewRegistry())
	lfs := &lfsTransfer{store: store, projectID: "prj_1", token: "rt-prj-1", tmpDir: t.TempDir(),
		log: zaptest.NewLogger(t), observe: func(string) {}}
	oid := strings.Repeat("a", 64)
	for _, tc := range []struct {
		name, method, path, token, body, code string
		h                                     http.Handler
	}{
		{"control API without the host token", http.MethodPut, "/v1/projects/prj_1", "", `{}`, "unauthorized", api},
		{"control API, body without runtimeToken", http.MethodPut, "/v1/projects/prj_1", "host-token", `{}`, "invalid_request", api},
		{"relay without the runtime token", http.MethodGet, LFSTransferPath + oid, "", "", "unauthorized", lfs},
		{"relay, bad oid", http.MethodGet, LFSTransferPath + "../x", "rt-prj-1", "", "invalid_oid", lfs},
		{"relay, missing object", http.MethodGet, LFSTransferPath + oid, "rt-prj-1", "", "object_not_found", lfs},
		{"relay, upload that does not hash to its oid", http.MethodPut, LFSTransferPath + oid, "rt-prj-1", "x", "upload_rejected", lfs},
		{"relay, other method", http.MethodDelete, LFSTransferPath + oid, "rt-prj-1", "", "method_not_allowed", lfs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			rec := httptest.NewRecorder()
			tc.h.ServeHTTP(rec, req)
			assertEnvelope(t, rec, tc.code)
		})
	}
}

func assertEnvelope(t *testing.T, rec *httptest.ResponseRecorder, code string) {
	t.Helper()
	want := wire.Codes[code]
	var body wire.ErrorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("not the envelope: %d %q %q (%v)", rec.Code, rec.Header().Get("Content-Type"), rec.Body, err)
	}
	if rec.Code != want.Status || body.Error.Code != code || body.Error.Type != want.Type || body.Error.Message == "" {
		t.Fatalf("got %d %+v, want %d %s %s", rec.Code, body.Error, want.Status, want.Type, code)
	}
}
