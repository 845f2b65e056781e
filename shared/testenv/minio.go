package testenv

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// MinIOVersion is the pinned MinIO server (keep in step with the Makefile's
// MINIO_VERSION); DefaultMinIOBin is where `make tools` installs it.
const MinIOVersion = "v0.0.0-20260212201848-7aac2a2c5b7c"

// DefaultMinIOBin returns $HOME/.cache/svc-tools/minio/<version>/minio.
func DefaultMinIOBin() string {
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "svc-tools", "minio", MinIOVersion, "minio")
}

// S3Env is one fresh bucket on a MinIO (or S3) server.
type S3Env struct {
	Endpoint  string // host:port, plain HTTP
	AccessKey string
	SecretKey string
	Bucket    string
}

// MinIOServer is a MinIO process on 127.0.0.1 with its own data dir and
// random root credentials. Stop and Start keep the port and the data, so
// degrade tests can take storage away and bring it back.
type MinIOServer struct {
	Endpoint  string
	AccessKey string
	SecretKey string

	bin, dir string
	mu       sync.Mutex
	proc     *process
}

// minioBin is $SVC_MINIO_BIN or DefaultMinIOBin, checked to exist.
func minioBin() (string, error) {
	bin := os.Getenv(EnvMinIOBin)
	if bin == "" {
		bin = DefaultMinIOBin()
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("testenv: MinIO server binary %s is missing: run `make tools` (it builds the pinned MinIO %s once) or set %s: %w",
			bin, MinIOVersion, EnvMinIOBin, err)
	}
	return bin, nil
}

// StartMinIO starts a MinIO server on a free port and returns once
// /minio/health/ready answers 200. Call Close when done.
func StartMinIO(ctx context.Context) (*MinIOServer, error) {
	bin, err := minioBin()
	if err != nil {
		return nil, err
	}
	return inTempDir("minio", func(dir string) (*MinIOServer, error) {
		s := &MinIOServer{AccessKey: "svc" + randomHex(8), SecretKey: randomHex(16), bin: bin, dir: dir}
		return s, onFreePort(func(port int) error {
			s.Endpoint = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			return s.Start(ctx)
		})
	})
}

// NewMinIOServer starts a dedicated MinIO for one test (closed at its end);
// use it when the test stops and restarts storage. A missing binary fails
// the test with the instruction to run `make tools`.
func NewMinIOServer(t testing.TB) *MinIOServer {
	t.Helper()
	s, err := StartMinIO(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// Start (re)starts the server on its port and data dir and waits until it
// is ready. Starting a running server is a no-op.
func (s *MinIOServer) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		select {
		case <-s.proc.exited:
		default:
			return nil
		}
	}
	cmd := exec.Command(s.bin, "server", filepath.Join(s.dir, "data"), "--address", s.Endpoint, "--quiet")
	cmd.Env = append(os.Environ(),
		"MINIO_ROOT_USER="+s.AccessKey, "MINIO_ROOT_PASSWORD="+s.SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_CI_CD=on")
	proc, err := startProcess(cmd, filepath.Join(s.dir, "minio.log"), nil)
	if err != nil {
		return fmt.Errorf("testenv: minio: %w", err)
	}
	s.proc = proc
	ready := "http://" + s.Endpoint + "/minio/health/ready"
	err = pollUntil(ctx, 60*time.Second, proc.exited, func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ready, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", ready, resp.Status)
		}
		return nil
	})
	if err != nil {
		proc.stop(syscall.SIGKILL, 5*time.Second)
		return fmt.Errorf("testenv: minio did not start: %w\n%s", err, proc.logTail())
	}
	return nil
}

// Stop stops the server (the data dir stays, for Start).
func (s *MinIOServer) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.stop(syscall.SIGTERM, 10*time.Second)
	}
}

// Close stops the server and removes its data.
func (s *MinIOServer) Close() {
	s.Stop()
	os.RemoveAll(s.dir)
}

// Client returns a minio-go client with the root credentials.
func (s *MinIOServer) Client() (*minio.Client, error) {
	return newMinIOClient(s.Endpoint, s.AccessKey, s.SecretKey)
}

// NewBucket creates a bucket with a random name, removed with its objects
// when the test ends.
func (s *MinIOServer) NewBucket(t testing.TB) S3Env {
	t.Helper()
	return newBucket(t, S3Env{Endpoint: s.Endpoint, AccessKey: s.AccessKey, SecretKey: s.SecretKey})
}

func newMinIOClient(endpoint, access, secret string) (*minio.Client, error) {
	return minio.New(endpoint, &minio.Options{Creds: credentials.NewStaticV4(access, secret, "")})
}

var sharedMinIO struct {
	once sync.Once
	env  S3Env
	err  error
}

// MinIO returns a fresh, empty bucket for the test, removed at its end. The
// server is $SVC_TEST_S3_ENDPOINT (with SVC_TEST_S3_ACCESS_KEY and
// SVC_TEST_S3_SECRET_KEY) or one MinIO started for this test process. A
// missing MinIO binary fails the test (run `make tools`); it never skips.
func MinIO(t testing.TB) S3Env {
	t.Helper()
	sharedMinIO.once.Do(func() {
		if ep := os.Getenv(EnvS3Endpoint); ep != "" {
			sharedMinIO.env = S3Env{Endpoint: ep, AccessKey: os.Getenv(EnvS3AccessKey), SecretKey: os.Getenv(EnvS3SecretKey)}
			return
		}
		srv, err := StartMinIO(context.Background())
		if err != nil {
			sharedMinIO.err = err
			return
		}
		onTeardown(srv.Close)
		sharedMinIO.env = S3Env{Endpoint: srv.Endpoint, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}
	})
	if sharedMinIO.err != nil {
		t.Fatalf("testenv: no MinIO: %v", sharedMinIO.err)
	}
	return newBucket(t, sharedMinIO.env)
}

func newBucket(t testing.TB, env S3Env) S3Env {
	t.Helper()
	client, err := newMinIOClient(env.Endpoint, env.AccessKey, env.SecretKey)
	if err != nil {
		t.Fatalf("testenv: minio client: %v", err)
	}
	env.Bucket = "t-" + randomHex(10)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := client.MakeBucket(ctx, env.Bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("testenv: create bucket %s at %s: %v", env.Bucket, env.Endpoint, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// ForceDelete is MinIO's "remove the bucket and its objects".
		err := client.RemoveBucketWithOptions(ctx, env.Bucket, minio.RemoveBucketOptions{ForceDelete: true})
		if err != nil && minio.ToErrorResponse(err).Code != minio.NoSuchBucket {
			t.Logf("testenv: remove bucket %s: %v", env.Bucket, err)
		}
	})
	return env
}
