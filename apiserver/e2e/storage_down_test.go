package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/testenv"
)

// `apiserver serve` exited while object storage was down,
// taking the public chat API (which needs no storage) down with it. It now
// starts, answers chat completions, reports storage in /readyz and
// svc_object_storage_up, and notices on its own when storage comes back.
func TestAPIServerStartsWhileStorageIsDown(t *testing.T) {
	e := newEnv(t)
	s3 := testenv.MinIO(t)
	proxy := testenv.NewFaultProxy(t, s3.Endpoint)
	proxy.SetDown(true)
	a := e.startAPI("SVC_STORAGE=s3", "SVC_S3_ENDPOINT="+proxy.Addr(), "SVC_S3_BUCKET="+s3.Bucket,
		"SVC_S3_ACCESS_KEY="+s3.AccessKey, "SVC_S3_SECRET_KEY="+s3.SecretKey)
	acc := e.account("free")

	ready := func() (int, map[string]string) {
		t.Helper()
		res, err := http.Get(a.URL + "/readyz")
		must(t, err)
		defer res.Body.Close()
		var m map[string]string
		_ = json.NewDecoder(res.Body).Decode(&m)
		return res.StatusCode, m
	}
	metric := func() string {
		t.Helper()
		res, err := http.Get(a.URL + "/metrics")
		must(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "svc_object_storage_up ") {
				return strings.TrimPrefix(l, "svc_object_storage_up ")
			}
		}
		return "missing"
	}
	waitStorage := func(want string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			code, m := ready()
			if code == 200 && m["storage"] == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("readyz %d %v, want storage %s", code, m, want)
			}
			time.Sleep(100 * time.Millisecond) // poll with a deadline: the check runs in the background
		}
	}
	waitStorage("unavailable")
	if m := metric(); m != "0" {
		t.Fatalf("svc_object_storage_up %s while down", m)
	}
	comp, err := client(a.URL+"/api/v1", acc.key).Chat.Completions.New(context.Background(), userMsg("hello"))
	if err != nil || len(comp.Choices) == 0 {
		t.Fatalf("chat completion with storage down: %v", err)
	}

	proxy.SetDown(false)
	waitStorage("ok")
	if m := metric(); m != "1" {
		t.Fatalf("svc_object_storage_up %s once back", m)
	}
}
