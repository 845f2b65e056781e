// Package objstoretest is the one contract suite every objstore.Store backend
// passes (spec 2.7 objects, spec 4.3 presigned LFS URLs, and the conditional
// writes the pod fences with, spec 10.1.1). Call Run from a backend's tests:
//
//	func TestContract(t *testing.T) {
//		objstoretest.Run(t, func(t *testing.T) objstore.Store { return newStore(t) })
//	}
//
// newStore must return an empty store per call, able to presign URLs that a
// plain net/http client can use.
package objstoretest

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/objstore"
)

// Run runs the contract suite against stores made by newStore.
func Run(t *testing.T, newStore func(t *testing.T) objstore.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s objstore.Store)
	}{
		{"RoundTrip", testRoundTrip},
		{"OverwriteChangesETag", testOverwrite},
		{"IfNoneMatchCreateOnly", testIfNoneMatch},
		{"IfMatch", testIfMatch},
		{"ConcurrentConditionalWriters", testConcurrentIfMatch},
		{"Missing", testMissing},
		{"DeleteIdempotent", testDelete},
		{"List", testList},
		{"InvalidKeys", testInvalidKeys},
		{"PresignGetPut", testPresign},
		{"LargeStreamedPut", testLargeStreamed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t))
		})
	}
}

func put(t *testing.T, s objstore.Store, key, content string, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	t.Helper()
	return s.Put(t.Context(), key, strings.NewReader(content), int64(len(content)), opts)
}

func mustPut(t *testing.T, s objstore.Store, key, content string) objstore.ObjectInfo {
	t.Helper()
	info, err := put(t, s, key, content, objstore.PutOptions{})
	if err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
	return info
}

func read(t *testing.T, s objstore.Store, key string) (string, objstore.ObjectInfo) {
	t.Helper()
	rc, info, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("Get(%q): read: %v", key, err)
	}
	return string(b), info
}

func md5hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

func testRoundTrip(t *testing.T, s objstore.Store) {
	const key, content = "p1/repo.git.tar.gz", "hello, durable world"
	pi, err := put(t, s, key, content, objstore.PutOptions{ContentType: "application/gzip"})
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	if pi.ETag == "" || strings.Contains(pi.ETag, `"`) {
		t.Fatalf("Put ETag = %q, want non-empty without quotes", pi.ETag)
	}
	if pi.ETag != md5hex(content) {
		t.Errorf("Put ETag = %q, want hex md5 %q of a single-part put", pi.ETag, md5hex(content))
	}
	got, gi := read(t, s, key)
	if got != content {
		t.Errorf("Get content = %q, want %q", got, content)
	}
	hi, err := s.Head(t.Context(), key)
	if err != nil {
		t.Fatalf("Head: %v", err)
	}
	for name, info := range map[string]objstore.ObjectInfo{"Get": gi, "Head": hi} {
		if info.ETag != pi.ETag || info.Size != int64(len(content)) || info.Key != key {
			t.Errorf("%s info = %+v, want key %q size %d etag %q", name, info, key, len(content), pi.ETag)
		}
		if info.ContentType != "application/gzip" {
			t.Errorf("%s content type = %q", name, info.ContentType)
		}
		if info.LastModified.IsZero() {
			t.Errorf("%s LastModified is zero", name)
		}
	}
	// The empty object is an object too.
	ei := mustPut(t, s, "p1/empty", "")
	if got, info := read(t, s, "p1/empty"); got != "" || info.Size != 0 || info.ETag != ei.ETag {
		t.Errorf("empty object: %q %+v", got, info)
	}
}

func testOverwrite(t *testing.T, s objstore.Store) {
	a := mustPut(t, s, "k", "version one")
	b := mustPut(t, s, "k", "version two")
	if a.ETag == b.ETag {
		t.Fatalf("overwrite kept ETag %q", a.ETag)
	}
	if got, info := read(t, s, "k"); got != "version two" || info.ETag != b.ETag {
		t.Fatalf("after overwrite: %q etag %q, want %q etag %q", got, info.ETag, "version two", b.ETag)
	}
}

func testIfNoneMatch(t *testing.T, s objstore.Store) {
	create := objstore.PutOptions{IfNoneMatch: "*"}
	first, err := put(t, s, "p/deps-x.tar.gz", "first", create)
	if err != nil {
		t.Fatalf("first create: %v", err)
	}
	if _, err := put(t, s, "p/deps-x.tar.gz", "second", create); !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("second create: err = %v, want ErrPreconditionFailed", err)
	}
	if got, info := read(t, s, "p/deps-x.tar.gz"); got != "first" || info.ETag != first.ETag {
		t.Fatalf("after refused create: %q etag %q, want first content", got, info.ETag)
	}
}

func testIfMatch(t *testing.T, s objstore.Store) {
	v1 := mustPut(t, s, "k", "v1")
	v2, err := put(t, s, "k", "v2", objstore.PutOptions{IfMatch: v1.ETag})
	if err != nil {
		t.Fatalf("IfMatch current ETag: %v", err)
	}
	tests := []struct {
		name, key, etag string
	}{
		{"stale etag", "k", v1.ETag},
		{"made-up etag", "k", md5hex("never written")},
		{"missing object", "absent", v1.ETag},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := put(t, s, tc.key, "v3", objstore.PutOptions{IfMatch: tc.etag})
			if !errors.Is(err, objstore.ErrPreconditionFailed) {
				t.Fatalf("err = %v, want ErrPreconditionFailed", err)
			}
		})
	}
	if got, info := read(t, s, "k"); got != "v2" || info.ETag != v2.ETag {
		t.Fatalf("after refused puts: %q etag %q, want v2 etag %q", got, info.ETag, v2.ETag)
	}
	if _, err := s.Head(t.Context(), "absent"); !errors.Is(err, objstore.ErrNotExist) {
		t.Fatalf("refused IfMatch created the object: Head err = %v", err)
	}
}

func testConcurrentIfMatch(t *testing.T, s objstore.Store) {
	const writers = 8
	base := mustPut(t, s, "p/repo.git.tar.gz", "base")
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners []string
		others  []error
	)
	start := make(chan struct{})
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			content := fmt.Sprintf("writer %d", i)
			_, err := s.Put(context.Background(), "p/repo.git.tar.gz", strings.NewReader(content), int64(len(content)), objstore.PutOptions{IfMatch: base.ETag})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				winners = append(winners, content)
			case !errors.Is(err, objstore.ErrPreconditionFailed):
				others = append(others, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(others) > 0 {
		t.Fatalf("unexpected errors: %v", others)
	}
	if len(winners) != 1 {
		t.Fatalf("%d writers won the same IfMatch, want exactly 1: %q", len(winners), winners)
	}
	if got, _ := read(t, s, "p/repo.git.tar.gz"); got != winners[0] {
		t.Fatalf("content %q, want the winner's %q", got, winners[0])
	}
}

func testMissing(t *testing.T, s objstore.Store) {
	mustPut(t, s, "dir/obj", "x")
	for _, key := range []string{"nope", "dir", "dir/obj/below", "di"} {
		if _, _, err := s.Get(t.Context(), key); !errors.Is(err, objstore.ErrNotExist) {
			t.Errorf("Get(%q) err = %v, want ErrNotExist", key, err)
		}
		if _, err := s.Head(t.Context(), key); !errors.Is(err, objstore.ErrNotExist) {
			t.Errorf("Head(%q) err = %v, want ErrNotExist", key, err)
		}
	}
}

func testDelete(t *testing.T, s objstore.Store) {
	mustPut(t, s, "p/assets/a.bin", "x")
	for i := range 2 {
		if err := s.Delete(t.Context(), "p/assets/a.bin"); err != nil {
			t.Fatalf("Delete #%d: %v", i+1, err)
		}
	}
	if err := s.Delete(t.Context(), "never/was"); err != nil {
		t.Fatalf("Delete missing: %v", err)
	}
	if _, err := s.Head(t.Context(), "p/assets/a.bin"); !errors.Is(err, objstore.ErrNotExist) {
		t.Fatalf("Head after Delete: %v", err)
	}
	// The key space is usable again after pruning.
	mustPut(t, s, "p/assets/a.bin", "y")
}

func testList(t *testing.T, s objstore.Store) {
	keys := []string{"p1/lfs/objects/bb", "p1/lfs/objects/aa", "p1/assets/x/y.png", "p1/assets.txt",
		"p1/repo.git.tar.gz", "p2/repo.git.tar.gz", "deps-1.tar.gz", "p10/repo.git.tar.gz"}
	for _, k := range keys {
		mustPut(t, s, k, "content of "+k)
	}
	tests := []struct {
		prefix string
		want   []string
	}{
		{"", []string{"deps-1.tar.gz", "p1/assets.txt", "p1/assets/x/y.png", "p1/lfs/objects/aa",
			"p1/lfs/objects/bb", "p1/repo.git.tar.gz", "p10/repo.git.tar.gz", "p2/repo.git.tar.gz"}},
		{"p1/", []string{"p1/assets.txt", "p1/assets/x/y.png", "p1/lfs/objects/aa", "p1/lfs/objects/bb", "p1/repo.git.tar.gz"}},
		{"p1", []string{"p1/assets.txt", "p1/assets/x/y.png", "p1/lfs/objects/aa", "p1/lfs/objects/bb",
			"p1/repo.git.tar.gz", "p10/repo.git.tar.gz"}},
		{"p1/lfs/objects/", []string{"p1/lfs/objects/aa", "p1/lfs/objects/bb"}},
		{"p1/assets", []string{"p1/assets.txt", "p1/assets/x/y.png"}},
		{"p3/", nil},
		{"p1/repo.git.tar.gz/", nil},
	}
	for _, tc := range tests {
		t.Run("prefix="+tc.prefix, func(t *testing.T) {
			var got []string
			err := s.List(t.Context(), tc.prefix, func(info objstore.ObjectInfo) error {
				if info.Size != int64(len("content of "+info.Key)) || info.ETag != md5hex("content of "+info.Key) {
					t.Errorf("info of %q = %+v", info.Key, info)
				}
				got = append(got, info.Key)
				return nil
			})
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("List(%q) = %q, want %q", tc.prefix, got, tc.want)
			}
		})
	}
	stop := errors.New("stop")
	n := 0
	err := s.List(t.Context(), "", func(objstore.ObjectInfo) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Fatalf("List with failing fn: err %v after %d calls, want stop after 1", err, n)
	}
}

func testInvalidKeys(t *testing.T, s objstore.Store) {
	for _, key := range []string{"", "/abs", "../escape", "a/../../b", "a/./b", "a//b", "a/", "./a", "..",
		`a\b`, "a\x00b", strings.Repeat("k", 1025)} {
		ctx := t.Context()
		_, err := s.Put(ctx, key, strings.NewReader("x"), 1, objstore.PutOptions{})
		check := func(op string, err error) {
			if !errors.Is(err, objstore.ErrInvalidKey) {
				t.Errorf("%s(%q) err = %v, want ErrInvalidKey", op, key, err)
			}
		}
		check("Put", err)
		_, _, err = s.Get(ctx, key)
		check("Get", err)
		_, err = s.Head(ctx, key)
		check("Head", err)
		check("Delete", s.Delete(ctx, key))
		_, err = s.PresignGet(ctx, key, time.Minute)
		check("PresignGet", err)
		_, err = s.PresignPut(ctx, key, time.Minute)
		check("PresignPut", err)
	}
}

func testPresign(t *testing.T, s objstore.Store) {
	const key = "p1/lfs/objects/0123abcd"
	content := strings.Repeat("large file bytes ", 1000)
	putURL, err := s.PresignPut(t.Context(), key, 5*time.Minute)
	if err != nil {
		t.Fatalf("PresignPut: %v", err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, putURL, strings.NewReader(content))
	if err != nil {
		t.Fatal(err)
	}
	resp := do(t, req)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("presigned PUT: %s: %s", resp.Status, resp.body)
	}
	info, err := s.Head(t.Context(), key)
	if err != nil || info.Size != int64(len(content)) || info.ETag != md5hex(content) {
		t.Fatalf("after presigned PUT: Head = %+v, %v", info, err)
	}
	getURL, err := s.PresignGet(t.Context(), key, 5*time.Minute)
	if err != nil {
		t.Fatalf("PresignGet: %v", err)
	}
	req, _ = http.NewRequestWithContext(t.Context(), http.MethodGet, getURL, nil)
	resp = do(t, req)
	if resp.StatusCode != http.StatusOK || resp.body != content {
		t.Fatalf("presigned GET: %s, %d bytes, want 200 and %d bytes", resp.Status, len(resp.body), len(content))
	}
	// A GET URL does not authorise a PUT.
	req, _ = http.NewRequestWithContext(t.Context(), http.MethodPut, getURL, strings.NewReader("evil"))
	if resp := do(t, req); resp.StatusCode != http.StatusForbidden {
		t.Errorf("PUT with a GET URL: %s, want 403", resp.Status)
	}
	// A tampered signature is refused.
	req, _ = http.NewRequestWithContext(t.Context(), http.MethodGet, tamper(getURL), nil)
	if resp := do(t, req); resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET with a tampered URL: %s, want 403", resp.Status)
	}
	if _, err := s.PresignGet(t.Context(), key, 0); err == nil {
		t.Errorf("PresignGet with zero expiry succeeded")
	}
	if got, _ := read(t, s, key); got != content {
		t.Fatalf("content changed by refused requests")
	}
}

// tamper flips the last character of the URL's path (part of the key).
func tamper(u string) string {
	i := strings.Index(u, "?")
	b := []byte(u)
	if b[i-1] == 'd' {
		b[i-1] = 'e'
	} else {
		b[i-1] = 'd'
	}
	return string(b)
}

type response struct {
	*http.Response
	body string
}

func do(t *testing.T, req *http.Request) response {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Redacted(), err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: read body: %v", req.Method, err)
	}
	return response{resp, string(b)}
}

// LargeSize is the size of the streamed put; larger than one 16 MiB part of
// the s3 backend, so it exercises multipart uploads.
const LargeSize = 20<<20 + 12345

func testLargeStreamed(t *testing.T, s objstore.Store) {
	src := io.LimitReader(rand.NewChaCha8([32]byte{1, 2, 3}), LargeSize)
	want := md5.New()
	// Hide the length: only an io.Reader, size -1.
	info, err := s.Put(t.Context(), "p/deps-big.tar.gz", struct{ io.Reader }{io.TeeReader(src, want)}, -1, objstore.PutOptions{})
	if err != nil {
		t.Fatalf("streamed Put: %v", err)
	}
	if info.Size != LargeSize {
		t.Errorf("Put size = %d, want %d", info.Size, LargeSize)
	}
	rc, gi, err := s.Get(t.Context(), "p/deps-big.tar.gz")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	defer rc.Close()
	got := md5.New()
	n, err := io.Copy(got, rc)
	if err != nil {
		t.Fatalf("read back: %v", err)
	}
	if n != LargeSize || gi.Size != LargeSize || !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
		t.Fatalf("read back %d bytes (info %d), md5 match %v; want %d bytes", n, gi.Size, bytes.Equal(got.Sum(nil), want.Sum(nil)), LargeSize)
	}
	if gi.ETag != info.ETag {
		t.Errorf("Get ETag %q != Put ETag %q", gi.ETag, info.ETag)
	}
	// Conditions hold for streamed (multipart) puts too.
	stream := func() io.Reader {
		return struct{ io.Reader }{io.LimitReader(rand.NewChaCha8([32]byte{4, 5, 6}), LargeSize)}
	}
	_, err = s.Put(t.Context(), "p/deps-big.tar.gz", stream(), -1, objstore.PutOptions{IfNoneMatch: "*"})
	if !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("streamed create-only Put over an existing key: %v, want ErrPreconditionFailed", err)
	}
	next, err := s.Put(t.Context(), "p/deps-big.tar.gz", stream(), -1, objstore.PutOptions{IfMatch: info.ETag})
	if err != nil {
		t.Fatalf("streamed IfMatch Put with the current ETag: %v", err)
	}
	if next.ETag == info.ETag {
		t.Fatalf("ETag unchanged (%q) after replacing the content", next.ETag)
	}
}
