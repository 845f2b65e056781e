package fs_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/objstore/fs"
	"github.com/svc-dev/svc/shared/objstore/objstoretest"
	"github.com/svc-dev/svc/shared/wire"
)

// newServedStore returns a store in a temp dir whose presigned URLs are
// served by an httptest server at /objects.
// open is fs.New(dir, opts); an error fails t.
func open(t testing.TB, dir string, opts fs.Options) *fs.Store {
	t.Helper()
	s, err := fs.New(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newServedStore(t *testing.T, opts fs.Options) *fs.Store {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	t.Cleanup(srv.Close)
	opts.BaseURL = "http://" + srv.Listener.Addr().String() + "/objects"
	if opts.SigningKey == nil {
		opts.SigningKey = []byte("test signing key")
	}
	opts.Logger = zaptest.NewLogger(t)
	s := open(t, t.TempDir(), opts)
	srv.Config.Handler = fs.Handler(s, "/objects")
	srv.Start()
	return s
}

func TestContract(t *testing.T) {
	t.Parallel()
	objstoretest.Run(t, func(t *testing.T) objstore.Store { return newServedStore(t, fs.Options{}) })
}

// TestKeysStayInsideRoot is the counterpart of Gitea's local_test.go: no
// key, however spelled, reaches a file outside the root.
func TestKeysStayInsideRoot(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	root := filepath.Join(parent, "root")
	s := open(t, root, fs.Options{})
	outside := filepath.Join(parent, "outside")
	if err := os.WriteFile(outside, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		key     string
		invalid bool
	}{
		{"../outside", true},
		{"../../outside", true},
		{"a/../../outside", true},
		{"/etc/passwd", true},
		{`..\outside`, true},
		{"a/./b", true},
		{"..", true},
		{".", true},
		{"...", false}, // a plain name
		{"..a/b..", false},
		{"a/.../b", false},
		{"%2e%2e/outside", false}, // no decoding happens
	}
	for _, tc := range tests {
		t.Run(tc.key, func(t *testing.T) {
			_, err := s.Put(t.Context(), tc.key, strings.NewReader("x"), 1, objstore.PutOptions{})
			if tc.invalid != errors.Is(err, objstore.ErrInvalidKey) {
				t.Fatalf("Put(%q) err = %v, want invalid=%v", tc.key, err, tc.invalid)
			}
			if _, _, err := s.Get(t.Context(), tc.key); tc.invalid != errors.Is(err, objstore.ErrInvalidKey) {
				t.Fatalf("Get(%q) err = %v, want invalid=%v", tc.key, err, tc.invalid)
			}
		})
	}
	if b, _ := os.ReadFile(outside); string(b) != "secret" {
		t.Fatalf("file outside the root changed: %q", b)
	}
	// Every file written lies under the root.
	filepath.WalkDir(parent, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && p != outside && !strings.HasPrefix(p, root+string(filepath.Separator)) {
			t.Errorf("file %s outside the root", p)
		}
		return nil
	})
}

func TestListSkipsInternalFiles(t *testing.T) {
	t.Parallel()
	s := open(t, t.TempDir(), fs.Options{})
	if _, err := s.Put(t.Context(), "a", strings.NewReader("x"), 1, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// A leftover temp file of a crashed writer.
	if err := os.WriteFile(filepath.Join(s.Root(), ".tmp", "put-123"), []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	var keys []string
	if err := s.List(t.Context(), "", func(i objstore.ObjectInfo) error { keys = append(keys, i.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(keys) != "[a]" {
		t.Fatalf("List = %q, want [a]", keys)
	}
}

func TestPresignWithoutBaseURL(t *testing.T) {
	t.Parallel()
	s := open(t, t.TempDir(), fs.Options{})
	if _, err := s.PresignGet(t.Context(), "k", time.Minute); !errors.Is(err, fs.ErrNoBaseURL) {
		t.Fatalf("PresignGet err = %v, want ErrNoBaseURL", err)
	}
	if _, err := s.PresignPut(t.Context(), "k", time.Minute); !errors.Is(err, fs.ErrNoBaseURL) {
		t.Fatalf("PresignPut err = %v, want ErrNoBaseURL", err)
	}
}

func TestPresignExpiryAndLimits(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Unix())
	s := newServedStore(t, fs.Options{
		MaxPutBytes: 10,
		Now:         func() time.Time { return time.Unix(now.Load(), 0) },
	})
	ctx := t.Context()
	if _, err := s.Put(ctx, "k", strings.NewReader("content"), 7, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	getURL, err := s.PresignGet(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	putURL, err := s.PresignPut(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		method  string
		url     string
		body    string
		chunked bool
		advance time.Duration
		want    int
	}{
		{"get in time", http.MethodGet, getURL, "", false, 0, http.StatusOK},
		{"head in time", http.MethodHead, getURL, "", false, 0, http.StatusOK},
		{"put too large", http.MethodPut, putURL, "eleven byte", false, 0, http.StatusRequestEntityTooLarge},
		{"chunked put too large", http.MethodPut, putURL, "eleven byte", true, 0, http.StatusRequestEntityTooLarge},
		{"missing signature", http.MethodGet, strings.Split(getURL, "&sig=")[0], "", false, 0, http.StatusForbidden},
		{"wrong method", http.MethodDelete, getURL, "", false, 0, http.StatusMethodNotAllowed},
		{"get at expiry", http.MethodGet, getURL, "", false, time.Minute, http.StatusOK},
		{"get expired", http.MethodGet, getURL, "", false, time.Second, http.StatusForbidden},
		{"put expired", http.MethodPut, putURL, "new", false, 0, http.StatusForbidden},
	}
	for _, tc := range tests {
		now.Add(int64(tc.advance / time.Second))
		var body io.Reader
		if tc.body != "" {
			body = strings.NewReader(tc.body)
			if tc.chunked {
				body = struct{ io.Reader }{body} // hides the length
			}
		}
		req, err := http.NewRequestWithContext(ctx, tc.method, tc.url, body)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %s %q, want %d", tc.name, resp.Status, b, tc.want)
		}
		if resp.StatusCode >= 400 && tc.method != http.MethodHead {
			// The service's one envelope, with a declared code of this status.
			var eb wire.ErrorBody
			err := json.Unmarshal(b, &eb)
			spec, declared := wire.Codes[eb.Error.Code]
			if err != nil || !declared || spec.Status != resp.StatusCode || eb.Error.Type != spec.Type || eb.Error.Message == "" {
				t.Errorf("%s: error body %q is not the envelope of a declared code of status %d", tc.name, b, resp.StatusCode)
			}
		}
	}
	rc, _, err := s.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if b, _ := io.ReadAll(rc); string(b) != "content" {
		t.Fatalf("content = %q after refused requests", b)
	}
}

func TestHeadDoesNotReadContent(t *testing.T) {
	t.Parallel()
	s := open(t, t.TempDir(), fs.Options{})
	info, err := s.Put(t.Context(), "big", strings.NewReader("0123456789"), 10, objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Corrupting the content without touching the header leaves Head's
	// ETag unchanged: Head trusts the header, it does not rehash.
	p := filepath.Join(s.Root(), "objects", "big")
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("X"), 512); err != nil {
		t.Fatal(err)
	}
	f.Close()
	hi, err := s.Head(t.Context(), "big")
	if err != nil || hi.ETag != info.ETag {
		t.Fatalf("Head = %+v, %v; want ETag %q", hi, err, info.ETag)
	}
}

// TestConditionalPutAcrossProcesses races IfMatch writers in several
// processes sharing one directory: exactly one wins.
func TestConditionalPutAcrossProcesses(t *testing.T) {
	t.Parallel()
	if dir := os.Getenv("SVC_FS_RACE_DIR"); dir != "" {
		raceHelper(t, dir)
		return
	}
	dir := t.TempDir()
	s := open(t, dir, fs.Options{})
	base, err := s.Put(t.Context(), "p/repo.git.tar.gz", strings.NewReader("base"), 4, objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const procs = 4
	cmds := make([]*exec.Cmd, procs)
	outs := make([]*strings.Builder, procs)
	for i := range cmds {
		outs[i] = new(strings.Builder)
		cmds[i] = exec.Command(os.Args[0], "-test.run=^TestConditionalPutAcrossProcesses$", "-test.v")
		cmds[i].Env = append(os.Environ(), "SVC_FS_RACE_DIR="+dir, "SVC_FS_RACE_ETAG="+base.ETag, fmt.Sprintf("SVC_FS_RACE_ID=%d", i))
		cmds[i].Stdout, cmds[i].Stderr = outs[i], outs[i]
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	wins := 0
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("helper %d: %v\n%s", i, err, outs[i])
		}
		wins += strings.Count(outs[i].String(), "RACE-WIN")
	}
	if wins != 1 {
		t.Fatalf("%d winners across processes, want 1", wins)
	}
}

func raceHelper(t *testing.T, dir string) {
	s := open(t, dir, fs.Options{})
	etag, id := os.Getenv("SVC_FS_RACE_ETAG"), os.Getenv("SVC_FS_RACE_ID")
	done := make(chan error)
	for g := range 4 {
		go func() {
			content := fmt.Sprintf("proc %s goroutine %d", id, g)
			_, err := s.Put(t.Context(), "p/repo.git.tar.gz", strings.NewReader(content), -1, objstore.PutOptions{IfMatch: etag})
			if err == nil {
				fmt.Println("RACE-WIN", content)
			} else if errors.Is(err, objstore.ErrPreconditionFailed) {
				err = nil
			}
			done <- err
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}
