// Package local is the embedded default runtime driver (docs/design.md §4): one
// `podagent serve` process per project on this machine, started on demand
// with the project's environment, reached on a loopback port, restarted on
// the next request after it died, and stopped (SIGTERM, then SIGKILL after a
// grace period) when the API server shuts down.
package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"

	"github.com/svc-dev/svc/apiserver/internal/runtimes"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/datadir"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/localproc"
	"github.com/svc-dev/svc/shared/runtimetoken"
	"github.com/svc-dev/svc/shared/settings"
	"github.com/svc-dev/svc/shared/syncmode"
	"github.com/svc-dev/svc/shared/wait"
)

// Name is the driver name recorded in runtime assignments.
const Name = "local"

// Options configure the driver.
type Options struct {
	// Binary is the podagent executable (SVC_PODAGENT_BIN; a bare name is
	// looked up in PATH).
	Binary string
	// APIURL is this API server as the pod reaches it (SVC_API_URL).
	APIURL string
	// DataDir is the API server's data dir: pods get it as SVC_DATA_DIR (the
	// fs object store is shared) and their workspaces live in
	// <DataDir>/runtimes/<projectId>/workspace.
	DataDir string
	// RuntimeSecret mints each project's runtime token; pods get only their
	// own token, never the secret.
	RuntimeSecret []byte
	// Env is added to every pod's environment (storage settings,
	// SVC_CALLBACK_ALLOWED_NETS, …; see PodEnv).
	Env []string
	// StartTimeout bounds a cold start, from exec to a 200 on /readyz
	// (default 60 s).
	StartTimeout time.Duration
	// StopGrace is how long a pod may take after SIGTERM before SIGKILL
	// (default 30 s: the pod's flushes take up to 21 s after its drain).
	StopGrace time.Duration
	// RetryAfter is told to clients after a failed cold start (default 5 s).
	RetryAfter time.Duration
	Log        *zap.Logger
}

// Driver is the local runtime driver.
type Driver struct {
	o      Options
	log    *zap.Logger
	client *http.Client
	sf     singleflight.Group

	mu       sync.Mutex
	procs    map[string]*proc
	lastErr  map[string]string
	restarts map[string]int
	starting map[string]bool
	starts   int
	closed   bool
}

type proc struct {
	cmd       *exec.Cmd
	url       *url.URL
	startedAt time.Time
	done      chan struct{} // closed when the process has exited
	exitErr   error         // set before done is closed
}

func (p *proc) alive() bool { return !wait.Closed(p.done) }

// New returns a driver; nothing starts until the first Ensure.
func New(o Options) *Driver {
	o.StartTimeout = settings.PositiveOr(o.StartTimeout, 60*time.Second)
	o.StopGrace = settings.PositiveOr(o.StopGrace, 30*time.Second)
	o.RetryAfter = settings.PositiveOr(o.RetryAfter, 5*time.Second)
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	return &Driver{o: o, log: o.Log.Named("runtime.local"),
		client: &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
		procs:  map[string]*proc{}, lastErr: map[string]string{}, restarts: map[string]int{}, starting: map[string]bool{}}
}

// Name implements runtimes.Driver.
func (d *Driver) Name() string { return Name }

// Ensure implements runtimes.Driver: it returns the running pod of the
// project or starts one (once, however many requests wait for it).
func (d *Driver) Ensure(ctx context.Context, p store.Project) (runtimes.Endpoint, error) {
	if pr := d.running(p.ID); pr != nil {
		return d.endpoint(p.ID, pr), nil
	}
	ch := d.sf.DoChan(p.ID, func() (any, error) {
		if pr := d.running(p.ID); pr != nil {
			return pr, nil
		}
		// The start is not bound to the request that triggered it: other
		// requests wait for the same start, and a pod is worth keeping.
		d.mu.Lock()
		d.starting[p.ID] = true
		d.starts++
		d.mu.Unlock()
		defer func() {
			d.mu.Lock()
			delete(d.starting, p.ID)
			d.mu.Unlock()
		}()
		return d.start(p)
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return runtimes.Endpoint{}, r.Err
		}
		return d.endpoint(p.ID, r.Val.(*proc)), nil
	case <-ctx.Done():
		return runtimes.Endpoint{}, ctx.Err()
	}
}

// Running implements runtimes.Finder: the project's pod when it runs;
// nothing is started.
func (d *Driver) Running(_ context.Context, p store.Project) (runtimes.Endpoint, bool, error) {
	if pr := d.running(p.ID); pr != nil {
		return d.endpoint(p.ID, pr), true, nil
	}
	return runtimes.Endpoint{}, false, nil
}

// RetryHint is the Retry-After told after a failed cold start.
func (d *Driver) RetryHint() time.Duration { return d.o.RetryAfter }

// Starts is the number of cold starts this driver has begun (every
// attempt, failed ones too): what operators and tests read to see that
// nothing started a pod.
func (d *Driver) Starts() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.starts
}

func (d *Driver) endpoint(projectID string, pr *proc) runtimes.Endpoint {
	return runtimes.Endpoint{URL: pr.url, Token: runtimetoken.Mint(d.o.RuntimeSecret, projectID)}
}

func (d *Driver) running(projectID string) *proc {
	d.mu.Lock()
	defer d.mu.Unlock()
	if pr := d.procs[projectID]; pr != nil && pr.alive() {
		return pr
	}
	return nil
}

// start runs one cold start: exec, then wait for /readyz. A process that
// exits before it is ready (a port taken between choosing and binding it,
// most often) is tried once more.
func (d *Driver) start(p store.Project) (*proc, error) {
	fail := func(err error) (*proc, error) {
		d.mu.Lock()
		d.lastErr[p.ID] = err.Error()
		d.mu.Unlock()
		d.log.Error("podagent cold start failed", zap.String("projectId", p.ID), zap.Error(err))
		return nil, &runtimes.StartError{ProjectID: p.ID, RetryAfter: d.o.RetryAfter, Err: err}
	}
	if len(d.o.RuntimeSecret) == 0 {
		return fail(errors.New("SVC_RUNTIME_AUTH_SECRET is not set: no runtime token can be minted"))
	}
	mode := p.CloudSyncMode
	if mode == "" {
		mode = syncmode.Default
	}
	deadline := time.Now().Add(d.o.StartTimeout)
	var err error
	for attempt := 0; attempt < 2 && time.Now().Before(deadline); attempt++ {
		var pr *proc
		pr, err = d.startOnce(p.ID, mode, deadline)
		if err == nil {
			d.mu.Lock()
			if d.closed {
				d.mu.Unlock()
				d.terminate(pr)
				return fail(errors.New("the API server is shutting down"))
			}
			if _, had := d.procs[p.ID]; had {
				d.restarts[p.ID]++
			}
			d.procs[p.ID] = pr
			delete(d.lastErr, p.ID)
			d.mu.Unlock()
			d.log.Info("podagent started", zap.String("projectId", p.ID), zap.Int("pid", pr.cmd.Process.Pid),
				zap.String("url", pr.url.String()), zap.String("mode", string(mode)),
				zap.Duration("took", time.Since(pr.startedAt)))
			go d.watch(p.ID, pr)
			return pr, nil
		}
		var early *exitedEarly
		if !errors.As(err, &early) {
			break
		}
	}
	return fail(err)
}

type exitedEarly struct{ err error }

func (e *exitedEarly) Error() string { return e.err.Error() }
func (e *exitedEarly) Unwrap() error { return e.err }

func (d *Driver) startOnce(projectID string, mode syncmode.Mode, deadline time.Time) (*proc, error) {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return nil, errors.New("the API server is shutting down")
	}
	dir, err := filepath.Abs(datadir.Runtime(d.o.DataDir, projectID))
	if err != nil {
		return nil, err
	}
	dataDir, err := filepath.Abs(d.o.DataDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "workspace"), 0o700); err != nil {
		return nil, err
	}
	port, err := localproc.FreePort("127.0.0.1")
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	logPath := filepath.Join(dir, "podagent.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child holds its own descriptor

	cmd := exec.Command(d.o.Binary, "serve")
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(baseEnv(os.Environ()), d.o.Env...)
	cmd.Env = append(cmd.Env,
		"SVC_PROJECT_ID="+projectID,
		syncmode.EnvVar+"="+string(mode),
		"SVC_RUNTIME_TOKEN="+runtimetoken.Mint(d.o.RuntimeSecret, projectID),
		"SVC_API_URL="+d.o.APIURL,
		"SVC_DATA_DIR="+dataDir,
		"SVC_WORKSPACE_DIR="+filepath.Join(dir, "workspace"),
		"SVC_HTTP_ADDR="+addr,
		// The pod fits its shutdown (drain, 5 s git flush, 5 s HEAD
		// snapshot, 10 s S3 flush) into the time before this driver's SIGKILL.
		"SVC_SHUTDOWN_GRACE="+d.o.StopGrace.String(),
	)
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("exec %s: %w", d.o.Binary, err)
	}
	pr := &proc{cmd: cmd, url: &url.URL{Scheme: "http", Host: addr}, startedAt: time.Now(), done: make(chan struct{})}
	go func() {
		pr.exitErr = cmd.Wait()
		close(pr.done)
	}()
	if err := d.waitReady(pr, deadline); err != nil {
		d.terminate(pr)
		return nil, fmt.Errorf("%w (podagent log: %s)", err, localproc.Tail(logPath, 1024))
	}
	return pr, nil
}

// waitReady polls /readyz until it answers 200, the process exits, or the
// deadline passes.
func (d *Driver) waitReady(pr *proc, deadline time.Time) error {
	backoff := 10 * time.Millisecond
	pod := internalapi.PodClient{BaseURL: pr.url.String(), HTTP: d.client}
	for {
		if pod.Ready(context.Background()) == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("podagent was not ready within %s", d.o.StartTimeout)
		}
		t := time.NewTimer(backoff)
		select {
		case <-pr.done:
			t.Stop()
			return &exitedEarly{fmt.Errorf("podagent exited before it was ready: %v", pr.exitErr)}
		case <-t.C:
		}
		backoff = min(backoff*2, 250*time.Millisecond)
	}
}

// watch forgets a pod when it exits; the next request starts a new one.
func (d *Driver) watch(projectID string, pr *proc) {
	<-pr.done
	d.mu.Lock()
	current := d.procs[projectID] == pr
	closed := d.closed
	if current && !closed {
		d.lastErr[projectID] = fmt.Sprintf("podagent exited: %v", pr.exitErr)
	}
	d.mu.Unlock()
	if current && !closed {
		d.log.Warn("podagent exited; the next request starts it again", zap.String("projectId", projectID),
			zap.Int("pid", pr.cmd.Process.Pid), zap.NamedError("exit", pr.exitErr))
	}
}

// Stop implements runtimes.Driver: SIGTERM, then SIGKILL after StopGrace.
func (d *Driver) Stop(ctx context.Context, projectID string) error {
	d.mu.Lock()
	pr := d.procs[projectID]
	delete(d.procs, projectID)
	d.mu.Unlock()
	if pr == nil {
		return nil
	}
	return d.stop(ctx, projectID, pr)
}

func (d *Driver) stop(ctx context.Context, projectID string, pr *proc) error {
	if !pr.alive() {
		return nil
	}
	d.log.Info("stopping podagent", zap.String("projectId", projectID), zap.Int("pid", pr.cmd.Process.Pid))
	_ = pr.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(d.o.StopGrace)
	defer t.Stop()
	select {
	case <-pr.done:
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	d.log.Warn("podagent did not stop in time; killing it", zap.String("projectId", projectID),
		zap.Int("pid", pr.cmd.Process.Pid), zap.Duration("grace", d.o.StopGrace))
	_ = pr.cmd.Process.Kill()
	<-pr.done
	return nil
}

// terminate kills a pod that never became ready.
func (d *Driver) terminate(pr *proc) {
	_ = pr.cmd.Process.Kill()
	<-pr.done
}

// Status implements runtimes.Driver.
func (d *Driver) Status(_ context.Context, projectID string) (runtimes.Status, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := runtimes.Status{Driver: Name, State: runtimes.StateStopped, Restarts: d.restarts[projectID],
		LastError: d.lastErr[projectID]}
	if pr := d.procs[projectID]; pr != nil && pr.alive() {
		st.State, st.Endpoint, st.PID, st.StartedAt = runtimes.StateRunning, pr.url.String(), pr.cmd.Process.Pid, pr.startedAt
	} else if d.starting[projectID] {
		st.State = runtimes.StateStarting
	} else if st.LastError != "" {
		st.State = runtimes.StateFailed
	}
	return st, nil
}

// Close stops every pod (in parallel) and refuses new starts.
func (d *Driver) Close(ctx context.Context) error {
	d.mu.Lock()
	d.closed = true
	procs := d.procs
	d.procs = map[string]*proc{}
	d.mu.Unlock()
	var wg sync.WaitGroup
	for id, pr := range procs {
		wg.Go(func() { _ = d.stop(ctx, id, pr) })
	}
	wg.Wait()
	return nil
}

// baseEnv keeps what a process needs from the API server's environment and
// drops everything else — the database URL, the runtime auth secret and
// provider keys never reach a pod. SVC_POD_<NAME>=v is passed as SVC_<NAME>=v,
// so operators (and tests) can set pod-only settings.
func baseEnv(environ []string) []string {
	keep := map[string]bool{"PATH": true, "HOME": true, "USER": true, "LOGNAME": true, "LANG": true,
		"TZ": true, "TMPDIR": true, "SSL_CERT_FILE": true, "SSL_CERT_DIR": true,
		"HTTP_PROXY": true, "HTTPS_PROXY": true, "NO_PROXY": true, "http_proxy": true, "https_proxy": true,
		"no_proxy": true, "GOCOVERDIR": true, "SVC_LOG_LEVEL": true, "LARGE_FILE_BYTES": true}
	var out, pod []string
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		switch {
		case keep[k] || strings.HasPrefix(k, "LC_"):
			out = append(out, kv)
		case strings.HasPrefix(k, "SVC_POD_") && len(k) > len("SVC_POD_"):
			pod = append(pod, "SVC_"+strings.TrimPrefix(k, "SVC_POD_")+"="+v)
		}
	}
	return append(out, pod...)
}

// PodEnv is the storage and callback settings every local pod inherits from
// the API server's configuration.
func PodEnv(storage, s3Endpoint, s3Bucket, s3AccessKey, s3SecretKey string, s3UseSSL bool, callbackAllowedNets string) []string {
	env := []string{"SVC_STORAGE=" + storage}
	if storage == "s3" {
		env = append(env, "SVC_S3_ENDPOINT="+s3Endpoint, "SVC_S3_BUCKET="+s3Bucket,
			"SVC_S3_ACCESS_KEY="+s3AccessKey, "SVC_S3_SECRET_KEY="+s3SecretKey,
			"SVC_S3_USE_SSL="+strconv.FormatBool(s3UseSSL))
	}
	if callbackAllowedNets != "" {
		env = append(env, "SVC_CALLBACK_ALLOWED_NETS="+callbackAllowedNets)
	}
	return env
}
