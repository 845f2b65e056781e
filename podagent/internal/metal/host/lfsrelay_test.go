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
)

// A guest's batch answer is rewritten: transfers point at the relay (never
// at object storage), verify goes back through the relay; the relay's
// transfer endpoint stores an upload only under its own sha256 and serves
// downloads from the project's objects.
func TestRelayMovesLargeFilesForTheGuest(t *testing.T) {
	t.Parallel()
	content := []byte("large file content of the guest\n")
	sum := sha256.Sum256(content)
	oid := hex.EncodeToString(sum[:])
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/internal/projects/prj_1/lfs/objects/batch" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/vnd.git-lfs+json")
		_, _ = io.WriteString(w, `{"transfer":"basic","hash_algo":"sha256","objects":[
			{"oid":"`+oid+`","size":32,"authenticated":true,"actions":{
				"upload":{"href":"http://minio:9000/bucket/prj_1/lfs/objects/`+oid+`?X-Amz-Signature=s","header":{"x-amz-acl":"private"},"expires_in":3600},
				"verify":{"href":"http://api.internal:8080/internal/projects/prj_1/lfs/verify","expires_in":3600}}},
			{"oid":"bad","size":1,"error":{"code":422,"message":"oid"}}]}`)
	}))
	defer api.Close()
	store, err := fsstore.New(t.TempDir(), fsstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var outcomes []string
	rl, err := newRelay(relayConfig{apiURL: api.URL, projectID: "prj_1", lfs: &lfsTransfer{store: store, projectID: "prj_1",
		tmpDir: t.TempDir(), log: zaptest.NewLogger(t), observe: func(o string) { outcomes = append(outcomes, o) }}}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer rl.close()
	base := "http://" + rl.addr()

	res, err := http.Post(base+"/internal/projects/prj_1/lfs/objects/batch", "application/vnd.git-lfs+json",
		strings.NewReader(`{"operation":"upload","objects":[{"oid":"`+oid+`","size":32}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var ans struct {
		Transfer string `json:"transfer"`
		Objects  []struct {
			OID     string                `json:"oid"`
			Actions map[string]*lfsAction `json:"actions"`
			Error   *struct{ Code int }   `json:"error"`
		} `json:"objects"`
	}
	if err := json.NewDecoder(res.Body).Decode(&ans); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	up, verify := ans.Objects[0].Actions["upload"], ans.Objects[0].Actions["verify"]
	if ans.Transfer != "basic" || up == nil || up.Href != base+LFSTransferPath+oid || up.Header != nil || up.ExpiresIn != 3600 ||
		verify == nil || verify.Href != base+"/internal/projects/prj_1/lfs/verify" || ans.Objects[1].Error == nil || ans.Objects[1].Error.Code != 422 {
		t.Fatalf("rewritten answer: %+v %+v %+v", ans, up, verify)
	}

	put := func(oid string, body []byte) int {
		req, _ := http.NewRequest(http.MethodPut, base+LFSTransferPath+oid, bytes.NewReader(body))
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
	res, err = http.Get(base + LFSTransferPath + oid)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !bytes.Equal(got, content) {
		t.Fatalf("download: %d %q", res.StatusCode, got)
	}
	res, err = http.Get(base + LFSTransferPath + strings.Repeat("0", 64))
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
