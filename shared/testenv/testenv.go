// Package testenv is the real-component harness of every module's tests
// (design section 4: integration tests run against a real PostgreSQL and a
// real MinIO, never mocks; spec 2.7 objects and the store behind spec 4.3).
//
//   - PostgresDB gives each test its own database, cloned from a template
//     migrated once per (Name, Hash); the server is SVC_TEST_DATABASE_URL or a
//     throw-away one started once per test process.
//   - MinIO gives each test a fresh bucket on SVC_TEST_S3_ENDPOINT or on a
//     MinIO started once per test process from SVC_MINIO_BIN.
//   - NewMinIOServer and NewFaultProxy let degrade tests stop storage or cut
//     the network to the DB and bring them back.
//
// Use Main from TestMain so the servers a test binary started are stopped
// when it exits:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// (Without it the servers still die with the test binary, through the
// parent-death signal, but their temp dirs stay behind.)
//
// Nothing here sleeps to synchronise: readiness is polled with a deadline.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// Environment variables read by the harness (and set by cmd/svc-testenv).
const (
	EnvDatabaseURL = "SVC_TEST_DATABASE_URL" // admin URL of a Postgres server
	EnvS3Endpoint  = "SVC_TEST_S3_ENDPOINT"  // host:port of a MinIO / S3
	EnvS3AccessKey = "SVC_TEST_S3_ACCESS_KEY"
	EnvS3SecretKey = "SVC_TEST_S3_SECRET_KEY"
	EnvMinIOBin    = "SVC_MINIO_BIN"  // the pinned MinIO server binary
	EnvPGBinDir    = "SVC_PG_BIN_DIR" // directory holding initdb and postgres
)

// ToolVariables are the SVC_ variables of the test harness itself: where make
// test and svc-testenv find the binaries and tools (SVC_BIN_DIR,
// SVC_MINIO_BIN, SVC_HELM_BIN, SVC_PG_BIN_DIR, SVC_TOOLS_DIR), the browser
// test's (SVC_CHROMIUM, SVC_CONSOLE_SCREENSHOTS) and the fs store's
// race test child's (SVC_FS_RACE_*). No binary reads them; a binary started
// from a test inherits them and accepts them as another program's
// (settings.Programs["the test harness"], kept equal by TestToolVariables).
var ToolVariables = []string{"SVC_BIN_DIR", "SVC_MINIO_BIN", "SVC_HELM_BIN", "SVC_PG_BIN_DIR", "SVC_TOOLS_DIR",
	"SVC_CHROMIUM", "SVC_CONSOLE_SCREENSHOTS", "SVC_FS_RACE_DIR", "SVC_FS_RACE_ETAG", "SVC_FS_RACE_ID"}

// Main runs the tests of m, stops every server this process started and
// exits with the tests' status. Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	Teardown()
	os.Exit(code)
}

var (
	teardownMu sync.Mutex
	teardowns  []func()
)

// onTeardown registers fn to run at Teardown, last registered first.
func onTeardown(fn func()) {
	teardownMu.Lock()
	defer teardownMu.Unlock()
	teardowns = append(teardowns, fn)
}

// Teardown stops the process-wide servers started so far. Main calls it;
// it is exported for programs (cmd/svc-testenv) that use the harness
// outside `go test`.
func Teardown() {
	teardownMu.Lock()
	fns := teardowns
	teardowns = nil
	teardownMu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("testenv: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// inTempDir makes a temp dir named svc-<kind>-* and starts a server in it
// with start; the dir is removed when start fails.
func inTempDir[S any](kind string, start func(dir string) (S, error)) (S, error) {
	var zero S
	dir, err := os.MkdirTemp("", "svc-"+kind+"-*")
	if err != nil {
		return zero, fmt.Errorf("testenv: %s temp dir: %w", kind, err)
	}
	s, err := start(dir)
	if err != nil {
		os.RemoveAll(dir)
		return zero, err
	}
	return s, nil
}

// onFreePort calls start with a free port, up to three times: the port may
// be taken before the server binds it. A server that timed out is not
// tried again.
func onFreePort(start func(port int) error) error {
	var err error
	for range 3 {
		port, perr := FreePort()
		if perr != nil {
			return perr
		}
		if err = start(port); err == nil || errors.Is(err, errTimeout) {
			return err
		}
	}
	return err
}

// RequireTool fails t when the command name is not on PATH (.ci/run
// installs every tool the tests need).
func RequireTool(t testing.TB, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Fatalf("%s is required (.ci/run installs it): %v", name, err)
	}
}

// randomHex returns 2n random hex digits.
func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// errTimeout is wrapped by pollUntil when the deadline passes.
var errTimeout = errors.New("timed out")

// pollUntil calls ready every 50ms until it returns nil or a stopPolling
// error, the deadline passes or exited is closed (the process died). It is the harness's one
// wait: readiness is observed, never assumed after a sleep.
func pollUntil(ctx context.Context, timeout time.Duration, exited <-chan struct{}, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if last = ready(ctx); last == nil {
			return nil
		}
		var stop stopPolling
		if errors.As(last, &stop) {
			return stop.err
		}
		select {
		case <-exited:
			return fmt.Errorf("process exited before it was ready (last probe: %v)", last)
		case <-ctx.Done():
			return fmt.Errorf("%w after %v (last probe: %v)", errTimeout, timeout, last)
		case <-tick.C:
		}
	}
}

// OnTeardown registers fn to run at Teardown (from Main), last registered
// first: harness packages beside this one (kubetest) stop their servers with
// the ones started here.
func OnTeardown(fn func()) { onTeardown(fn) }
