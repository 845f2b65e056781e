package publish

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/wire"
)

func TestPublish(t *testing.T) {
	t.Parallel()
	const sha = "0123456789abcdef0123456789abcdef01234567"
	var got wire.GitFlushRequest
	pod := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/agent/git-flush" || r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(401)
			json.NewEncoder(w).Encode(wire.ErrorBody{Error: wire.ErrorDetail{Code: "invalid_runtime_token"}})
			return
		}
		json.NewDecoder(r.Body).Decode(&got)
		json.NewEncoder(w).Encode(wire.GitFlushResponse{SHA: sha, Tag: got.Tag})
	}))
	defer pod.Close()
	now := time.Unix(1700000000, 0)
	res, err := Publish(context.Background(), pod.URL, "tok", "my-site", now)
	if err != nil || res.SHA != sha || res.Tag != "publish/my-site/1700000000" {
		t.Fatalf("%+v %v", res, err)
	}
	if got.Tag != res.Tag || got.TagMessage == "" {
		t.Fatalf("request = %+v", got)
	}
	if _, err := Publish(context.Background(), pod.URL, "wrong", "my-site", now); !errors.As(err, new(*internalapi.StatusError)) {
		t.Fatalf("bad token: %v", err)
	}
	for _, sub := range []string{"", "-x", "My-Site", "a/b", "--upload-pack=x"} {
		if _, err := Publish(context.Background(), pod.URL, "tok", sub, now); err == nil {
			t.Fatalf("subdomain %q accepted", sub)
		}
	}
	if _, err := Publish(context.Background(), "ftp://x", "tok", "a", now); err == nil {
		t.Fatal("bad pod URL accepted")
	}
}

func TestPublishRejectsMismatchedAnswer(t *testing.T) {
	t.Parallel()
	pod := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(wire.GitFlushResponse{SHA: "nope", Tag: "publish/other/1"})
	}))
	defer pod.Close()
	if _, err := Publish(context.Background(), pod.URL, "tok", "a", time.Unix(1, 0)); err == nil {
		t.Fatal("mismatched answer accepted")
	}
}
