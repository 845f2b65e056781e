package agentapi_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/apiserver/internal/server"
	"github.com/svc-dev/svc/apiserver/internal/server/servertest"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/shared/objstore"
	s3store "github.com/svc-dev/svc/shared/objstore/s3"
	"github.com/svc-dev/svc/shared/runtimetoken"
	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/testenv/testhttp"
	"github.com/svc-dev/svc/shared/wire"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var secret = []byte("agentapi-lfs-test-secret")

type world struct {
	srv      *servertest.Server
	objects  objstore.Store
	project  string // the project of the token
	other    string // a second project
	token    string
	otherTok string
}

// newWorld starts the API server in process (SQLite store for the
// projects, MinIO for the objects): the real handler behind the real
// runtime-token middleware.
func newWorld(t *testing.T) *world {
	t.Helper()
	ctx := context.Background()
	st := storetest.SQLite(t)
	ps := storetest.Projects(t, st, "one", "two")
	p1, p2 := ps[0], ps[1]
	env := testenv.MinIO(t)
	objs, err := s3store.New(ctx, s3store.Config{Endpoint: env.Endpoint, Bucket: env.Bucket, AccessKey: env.AccessKey, SecretKey: env.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	srv := servertest.New(t, server.Deps{Store: st, RuntimeSecret: secret, Objects: objs, Log: zaptest.NewLogger(t)})
	return &world{srv: srv, objects: objs, project: p1.ID, other: p2.ID,
		token: runtimetoken.Mint(secret, p1.ID), otherTok: runtimetoken.Mint(secret, p2.ID)}
}

func (w *world) post(t *testing.T, project, token, path string, body any) (int, []byte, string) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, w.srv.URL+"/internal/projects/"+project+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", wire.LFSMediaType)
	req.Header.Set("Accept", wire.LFSMediaType)
	resp, out := testhttp.Do(t, nil, req, token)
	return resp.StatusCode, out, resp.Header.Get("Content-Type")
}

func oidOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func batch(op string, objs ...wire.LFSPointer) wire.LFSBatchRequest {
	return wire.LFSBatchRequest{Operation: op, Transfers: []string{"basic"}, Objects: objs, HashAlgo: "sha256"}
}

func TestBatch(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()
	stored := []byte("stored large-file bytes")
	storedOID := oidOf(stored)
	if _, err := w.objects.Put(ctx, objstore.LFSKey(w.project, storedOID), bytes.NewReader(stored), int64(len(stored)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	missingOID := oidOf([]byte("never uploaded"))

	type want struct {
		status  int
		actions []string // sorted action names of objects[0]
		objErr  int      // code of objects[0].error
	}
	tests := []struct {
		name    string
		project string
		token   string
		body    any
		want    want
	}{
		{"upload of a new object gets upload and verify", w.project, w.token,
			batch("upload", wire.LFSPointer{OID: missingOID, Size: 14}), want{status: 200, actions: []string{"upload", "verify"}}},
		{"upload of a stored object gets no actions (dedup)", w.project, w.token,
			batch("upload", wire.LFSPointer{OID: storedOID, Size: int64(len(stored))}), want{status: 200}},
		{"download of a stored object", w.project, w.token,
			batch("download", wire.LFSPointer{OID: storedOID, Size: int64(len(stored))}), want{status: 200, actions: []string{"download"}}},
		{"download of a missing object is a per-object 404", w.project, w.token,
			batch("download", wire.LFSPointer{OID: missingOID, Size: 1}), want{status: 200, objErr: 404}},
		{"bad oid (not hex)", w.project, w.token,
			batch("upload", wire.LFSPointer{OID: strings.Repeat("z", 64), Size: 1}), want{status: 200, objErr: 422}},
		{"bad oid (path escape)", w.project, w.token,
			batch("download", wire.LFSPointer{OID: "../../other/lfs/objects/" + storedOID, Size: 1}), want{status: 200, objErr: 422}},
		{"bad oid (upper case)", w.project, w.token,
			batch("upload", wire.LFSPointer{OID: strings.ToUpper(missingOID), Size: 1}), want{status: 200, objErr: 422}},
		{"negative size", w.project, w.token,
			batch("upload", wire.LFSPointer{OID: missingOID, Size: -1}), want{status: 200, objErr: 422}},
		{"size above the limit", w.project, w.token,
			batch("upload", wire.LFSPointer{OID: missingOID, Size: wire.LFSMaxObjectBytes + 1}), want{status: 200, objErr: 422}},
		{"the other project's object is not visible", w.other, w.otherTok,
			batch("download", wire.LFSPointer{OID: storedOID, Size: int64(len(stored))}), want{status: 200, objErr: 404}},
		{"wrong project token", w.other, w.token,
			batch("download", wire.LFSPointer{OID: storedOID, Size: 1}), want{status: 401}},
		{"no token", w.project, "",
			batch("download", wire.LFSPointer{OID: storedOID, Size: 1}), want{status: 401}},
		{"unknown operation", w.project, w.token,
			batch("delete", wire.LFSPointer{OID: storedOID, Size: 1}), want{status: 422}},
		{"other hash algorithm", w.project, w.token,
			wire.LFSBatchRequest{Operation: "upload", HashAlgo: "sha512", Objects: []wire.LFSPointer{{OID: storedOID, Size: 1}}}, want{status: 409}},
		{"no objects", w.project, w.token, batch("upload"), want{status: 422}},
		{"too many objects", w.project, w.token,
			batch("upload", make([]wire.LFSPointer, wire.LFSMaxObjects+1)...), want{status: 413}},
		{"not JSON", w.project, w.token, "just a string", want{status: 400}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body, ctype := w.post(t, tt.project, tt.token, "/lfs/objects/batch", tt.body)
			if status != tt.want.status {
				t.Fatalf("status = %d, want %d: %s", status, tt.want.status, body)
			}
			if status != 200 {
				var env map[string]map[string]any
				if err := json.Unmarshal(body, &env); err != nil || env["error"]["code"] == nil {
					t.Fatalf("error body is not the JSON envelope: %s", body)
				}
				return
			}
			if ctype != wire.LFSMediaType {
				t.Fatalf("content type = %q", ctype)
			}
			var resp wire.LFSBatchResponse
			if err := json.Unmarshal(body, &resp); err != nil {
				t.Fatal(err)
			}
			if resp.Transfer != "basic" || len(resp.Objects) != 1 {
				t.Fatalf("response = %s", body)
			}
			o := resp.Objects[0]
			var got []string
			for name := range o.Actions {
				got = append(got, name)
			}
			if len(got) == 2 && got[0] > got[1] {
				got[0], got[1] = got[1], got[0]
			}
			if strings.Join(got, ",") != strings.Join(tt.want.actions, ",") {
				t.Fatalf("actions = %v, want %v: %s", got, tt.want.actions, body)
			}
			code := 0
			if o.Error != nil {
				code = o.Error.Code
			}
			if code != tt.want.objErr {
				t.Fatalf("object error = %d, want %d: %s", code, tt.want.objErr, body)
			}
		})
	}
}

// TestUploadThenVerifyThenDedup drives the protocol as git-lfs does: batch,
// PUT to the presigned URL, verify; a second batch then has no actions, and
// a download URL returns the bytes.
func TestUploadThenVerifyThenDedup(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	content := bytes.Repeat([]byte("0123456789abcdef"), 4096)
	p := wire.LFSPointer{OID: oidOf(content), Size: int64(len(content))}

	// verify before the upload: 404
	if status, body, _ := w.post(t, w.project, w.token, "/lfs/verify", p); status != 404 {
		t.Fatalf("verify of a missing object = %d %s", status, body)
	}
	_, body, _ := w.post(t, w.project, w.token, "/lfs/objects/batch", batch("upload", p))
	var resp wire.LFSBatchResponse
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatal(err)
	}
	up := resp.Objects[0].Actions["upload"]
	verify := resp.Objects[0].Actions["verify"]
	if up == nil || verify == nil || up.ExpiresIn <= 0 {
		t.Fatalf("actions = %s", body)
	}
	if !strings.HasPrefix(verify.Href, w.srv.URL+"/internal/projects/"+w.project+"/lfs/verify") {
		t.Fatalf("verify href = %q", verify.Href)
	}
	req, _ := http.NewRequest(http.MethodPut, up.Href, bytes.NewReader(content))
	put, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	put.Body.Close()
	if put.StatusCode != 200 {
		t.Fatalf("presigned PUT = %d", put.StatusCode)
	}
	info, err := w.objects.Head(context.Background(), objstore.LFSKey(w.project, p.OID))
	if err != nil || info.Size != p.Size {
		t.Fatalf("stored object: %+v %v", info, err)
	}
	if status, body, _ := w.post(t, w.project, w.token, "/lfs/verify", p); status != 200 {
		t.Fatalf("verify = %d %s", status, body)
	}
	if status, _, _ := w.post(t, w.project, w.token, "/lfs/verify", wire.LFSPointer{OID: p.OID, Size: p.Size + 1}); status != 422 {
		t.Fatalf("verify with a wrong size = %d, want 422", status)
	}
	if status, _, _ := w.post(t, w.other, w.token, "/lfs/verify", p); status != 401 {
		t.Fatalf("verify with another project's token = %d, want 401", status)
	}
	// second upload batch: nothing to do
	_, body, _ = w.post(t, w.project, w.token, "/lfs/objects/batch", batch("upload", p))
	resp = wire.LFSBatchResponse{}
	json.Unmarshal(body, &resp)
	if len(resp.Objects) != 1 || resp.Objects[0].Actions != nil || resp.Objects[0].Error != nil {
		t.Fatalf("second upload batch = %s", body)
	}
	_, body, _ = w.post(t, w.project, w.token, "/lfs/objects/batch", batch("download", p))
	resp = wire.LFSBatchResponse{}
	json.Unmarshal(body, &resp)
	get, err := http.Get(resp.Objects[0].Actions["download"].Href)
	if err != nil {
		t.Fatal(err)
	}
	defer get.Body.Close()
	got, _ := io.ReadAll(get.Body)
	if !bytes.Equal(got, content) {
		t.Fatalf("download returned %d bytes", len(got))
	}
}

// Verify checks the stored bytes' sha256 against the oid, not only the
// size: same-size bytes under another oid are refused and deleted, so the
// next upload batch asks for the upload again.
func TestVerifyChecksTheContentHash(t *testing.T) {
	w := newWorld(t)
	content := bytes.Repeat([]byte("right bytes "), 1000)
	p := wire.LFSPointer{OID: oidOf(content), Size: int64(len(content))}
	wrong := bytes.Repeat([]byte("wrong bytes "), 1000) // same size
	key := objstore.LFSKey(w.project, p.OID)
	if _, err := w.objects.Put(context.Background(), key, bytes.NewReader(wrong), int64(len(wrong)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	status, body, _ := w.post(t, w.project, w.token, "/lfs/verify", p)
	if status != 422 || !strings.Contains(string(body), "hash_mismatch") {
		t.Fatalf("verify of same-size wrong bytes = %d %s, want 422 hash_mismatch", status, body)
	}
	if _, err := w.objects.Head(context.Background(), key); err == nil {
		t.Fatal("the mismatching object was kept")
	}
	_, body, _ = w.post(t, w.project, w.token, "/lfs/objects/batch", batch("upload", p))
	var resp wire.LFSBatchResponse
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Objects[0].Actions["upload"] == nil {
		t.Fatalf("after a failed verify the batch must ask for the upload: %s", body)
	}
}
