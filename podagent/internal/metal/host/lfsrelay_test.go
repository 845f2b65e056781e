package host

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/shared/objstore"
	fsstore "github.com/svc-dev/svc/shared/objstore/fs"
	"github.com/svc-dev/svc/shared/testenv/testhttp"
	"github.com/svc-dev/svc/shared/wire"
)

// The host answers a guest's batch itself: transfers point at the relay
// (never at object storage, never at the API); the transfer endpoint
// stores an upload only under its own sha256 and serves downloads from the
// project's objects; a stored object needs no upload.
func TestRelayMovesLargeFilesForTheGuest(t *testing.T) {
	t.Parallel()
	content := []byte("large file content of the guest\n")
	sum := sha256.Sum256(content)
	oid := hex.EncodeToString(sum[:])
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the API was called: %s %s", r.Method, r.URL.Path)
	}))
	defer api.Close()
	store, err := fsstore.New(t.TempDir(), fsstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var outcomes []string
	rl, err := newRelay(relayConfig{apiURL: api.URL, projectID: "prj_1", lfs: &lfsTransfer{store: store, projectID: "prj_1", token: "rt-prj-1",
		tmpDir: t.TempDir(), log: zaptest.NewLogger(t), observe: func(o string) { outcomes = append(outcomes, o) }}}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer rl.close()
	base := "http://" + rl.addr()
	type answer struct {
		Transfer string `json:"transfer"`
		Objects  []struct {
			OID     string                     `json:"oid"`
			Actions map[string]*wire.LFSAction `json:"actions"`
			Error   *struct{ Code int }        `json:"error"`
		} `json:"objects"`
	}
	batch := func(op string) answer {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, base+"/internal/projects/prj_1/lfs/objects/batch",
			strings.NewReader(`{"operation":"`+op+`","transfers":["basic"],"objects":[{"oid":"`+oid+`","size":32},{"oid":"../x","size":1}]}`))
		req.Header.Set("Authorization", "Bearer rt-prj-1")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var ans answer
		if err := json.NewDecoder(res.Body).Decode(&ans); err != nil || res.StatusCode != 200 || len(ans.Objects) != 2 ||
			ans.Objects[1].Error == nil || ans.Objects[1].Error.Code != 422 || ans.Objects[1].Actions != nil {
			t.Fatalf("%s batch: %d %+v %v", op, res.StatusCode, ans, err)
		}
		return ans
	}
	if ans := batch("download"); ans.Objects[0].Error == nil || ans.Objects[0].Error.Code != 404 {
		t.Fatalf("download of a missing object: %+v", ans.Objects[0])
	}
	ans := batch("upload")
	up := ans.Objects[0].Actions["upload"]
	if ans.Transfer != "basic" || up == nil || up.Href != base+LFSTransferPath+oid || len(ans.Objects[0].Actions) != 1 ||
		up.Header["Authorization"] != "Bearer rt-prj-1" {
		t.Fatalf("upload answer: %+v %+v", ans, up)
	}
	// Without the project's runtime token (another local process) nothing
	// is answered or moved.
	for _, c := range []struct{ method, path, auth string }{
		{http.MethodPost, "/internal/projects/prj_1/lfs/objects/batch", ""},
		{http.MethodPost, "/internal/projects/prj_1/lfs/objects/batch", "Bearer other"},
		{http.MethodGet, LFSTransferPath + oid, ""},
		{http.MethodPut, LFSTransferPath + oid, "Bearer other"},
	} {
		req, _ := http.NewRequest(c.method, base+c.path, strings.NewReader(`{"operation":"upload","objects":[]}`))
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		if res, _ := testhttp.Do(t, nil, req, ""); res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%s %s with %q: %d", c.method, c.path, c.auth, res.StatusCode)
		}
	}
	outcomes = nil

	put := func(oid string, body []byte) int {
		req, _ := http.NewRequest(http.MethodPut, base+LFSTransferPath+oid, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer rt-prj-1")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if st := put(oid, []byte("forged content")); st != http.StatusUnprocessableEntity {
		t.Fatalf("forged upload: %d", st)
	}
	if _, err := store.Head(context.Background(), objstore.LFSKey("prj_1", oid)); err == nil {
		t.Fatal("a forged upload was stored")
	}
	if st := put("../../prj_2/x", content); st != http.StatusUnprocessableEntity && st != http.StatusForbidden {
		t.Fatalf("a path as oid: %d", st)
	}
	if st := put(oid, content); st != http.StatusOK {
		t.Fatalf("upload: %d", st)
	}
	rc, _, err := store.Get(context.Background(), objstore.LFSKey("prj_1", oid))
	if err != nil {
		t.Fatal(err)
	}
	stored, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(stored, content) {
		t.Fatalf("stored %q", stored)
	}
	if ans := batch("upload"); ans.Objects[0].Actions != nil || ans.Objects[0].Error != nil {
		t.Fatalf("upload of a stored object: %+v", ans.Objects[0])
	}
	if dl := batch("download").Objects[0].Actions["download"]; dl == nil || dl.Href != base+LFSTransferPath+oid {
		t.Fatalf("download answer: %+v", dl)
	}
	get := func(u string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		req.Header.Set("Authorization", "Bearer rt-prj-1")
		return http.DefaultClient.Do(req)
	}
	res, err := get(base + LFSTransferPath + oid)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !bytes.Equal(got, content) {
		t.Fatalf("download: %d %q", res.StatusCode, got)
	}
	res, err = get(base + LFSTransferPath + strings.Repeat("0", 64))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Fatalf("missing object: %d", res.StatusCode)
	}
	if strings.Join(outcomes, ",") != "rejected,rejected,upload,download" {
		t.Fatalf("outcomes %v", outcomes)
	}
}
