// Package host is the metal host (spec 10.5, "Micro-VM runtimes"): it runs
// one QEMU micro-VM guest per project and moves every durable artifact,
// since guests hold no object-storage credentials.
//
//   - Start: resume the project's snapshot if every archive it recorded
//     still has the recorded ETag; otherwise (metal_stale_snapshot_skipped_total)
//     cold boot: hydrate the source archive, then the data archive, into a
//     fresh disk, extract the durable .git into its staging directory (the
//     guest swaps it in at boot), and boot.
//   - Export: every ExportInterval (METAL_PROJECT_DATA_EXPORT_INTERVAL_MS)
//     pull .git (the guest commits the live tree first) and the writable
//     state; at suspend also the source archive. Writes are fenced by ETag.
//   - Discard (health gate: HealthFailures failed /healthz probes in a row;
//     dead-VM reaper: QEMU exited while nobody stopped it): rescue through the guest's
//     export, else stop the VM and read its disk read-only (package disk);
//     if nothing is saved, quarantine the disk with a JSON note
//     (metal_rescue_failed_quarantined_total).
package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"

	"github.com/svc-dev/svc/podagent/internal/callback"
	"github.com/svc-dev/svc/podagent/internal/metal/disk"
	"github.com/svc-dev/svc/podagent/internal/metal/guest"
	"github.com/svc-dev/svc/podagent/internal/metal/guestimage"
	"github.com/svc-dev/svc/podagent/internal/metal/vm"
	"github.com/svc-dev/svc/shared/archive"
	"github.com/svc-dev/svc/shared/localproc"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/repoarchive"
	"github.com/svc-dev/svc/shared/settings"
	"github.com/svc-dev/svc/shared/wire"
)

// DefaultExportInterval is METAL_PROJECT_DATA_EXPORT_INTERVAL_MS's default
// (spec 8: 2 minutes).
const DefaultExportInterval = 2 * time.Minute

// Options configure a Host.
type Options struct {
	Store objstore.Store
	Image guestimage.Image
	// Dir holds projects/<id>/ (disk, snapshot, run files) and quarantine/.
	Dir string
	// APIURL is the API the guest's relay forwards /internal calls to.
	APIURL string
	// QEMU, Accel (tcg or kvm), MemoryMB and DiskMB shape each VM.
	QEMU     string
	Accel    string
	MemoryMB int
	DiskMB   int
	// ExportInterval is how often .git and the data archive are pulled.
	ExportInterval time.Duration
	// Snapshots saves the VM state at suspend for a fast resume.
	Snapshots bool
	// HealthInterval is how often the health gate probes a guest's
	// /healthz (default 30s); HealthFailures consecutive failures (default
	// 3, each bounded by HealthTimeout, default 10s) discard the VM.
	HealthInterval time.Duration
	HealthTimeout  time.Duration
	HealthFailures int
	// PipeCommand is argv of the per-connection relay pipe (metalhost pipe);
	// the relay's address is appended.
	PipeCommand []string
	// BindHost is the address hostfwd listens on (default 127.0.0.1).
	BindHost     string
	StartTimeout time.Duration
	// GuestEnv is passed to every guest's pod (SVC_* settings).
	GuestEnv map[string]string
	// CallbackAllowedNets are the CIDRs guests' async webhook callbacks may
	// reach despite the SSRF guard (SVC_CALLBACK_ALLOWED_NETS): the host
	// forwards every callback (relay, callback.Forwarder) and enforces
	// them; guests get the same list for their early check.
	CallbackAllowedNets []netip.Prefix
	// CallbackTimeout bounds one forwarded callback POST (default 30s).
	CallbackTimeout time.Duration
	Tools           disk.Tools
	Registry        prometheus.Registerer
	Log             *zap.Logger
	// AfterDisk, when set, runs after a cold boot made the disk and before
	// the VM starts (tests change ownership inside it).
	AfterDisk func(ctx context.Context, projectID, image string) error
	// OnStopped, when set, is told each time a project's VM ends up
	// suspended, rescued or quarantined (tests wait on it).
	OnStopped func(projectID, state string)
}

// Metrics are the host's counters (spec 6).
type Metrics struct {
	RescueFailedQuarantined prometheus.Counter
	StaleSnapshotSkipped    prometheus.Counter
	Exports                 *prometheus.CounterVec
	// CallbackForwards counts guests' callbacks by outcome (forwarded,
	// refused by the SSRF guard, error reaching the target).
	CallbackForwards *prometheus.CounterVec
	// LFSTransfers counts guests' large-file transfers through the host
	// by outcome (upload, download, rejected).
	LFSTransfers *prometheus.CounterVec
}

// Host runs the guests of many projects.
type Host struct {
	o      Options
	log    *zap.Logger
	client *http.Client
	sf     singleflight.Group
	// callbacks forwards guests' async webhook callbacks (the relay's
	// guest.CallbackForwardPath).
	callbacks *callback.Forwarder
	Metrics   Metrics

	mu       sync.Mutex
	projects map[string]*project
}

// New returns a host; no VM runs until Ensure.
func New(o Options) (*Host, error) {
	if o.Store == nil || o.Dir == "" || o.Image.Kernel == "" {
		return nil, errors.New("metal host: Store, Dir and Image are required")
	}
	if err := vm.Check(o.QEMU); err != nil {
		return nil, err
	}
	if err := o.Tools.Check(); err != nil {
		return nil, err
	}
	o.ExportInterval = settings.PositiveOr(o.ExportInterval, DefaultExportInterval)
	o.HealthInterval = settings.PositiveOr(o.HealthInterval, 30*time.Second)
	o.HealthTimeout = settings.PositiveOr(o.HealthTimeout, 10*time.Second)
	o.HealthFailures = settings.PositiveOr(o.HealthFailures, 3)
	o.DiskMB = settings.PositiveOr(o.DiskMB, 512)
	if o.BindHost == "" {
		o.BindHost = "127.0.0.1"
	}
	o.StartTimeout = settings.PositiveOr(o.StartTimeout, 90*time.Second)
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if len(o.PipeCommand) == 0 {
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		o.PipeCommand = []string{self, "pipe"}
	}
	h := &Host{o: o, log: o.Log.Named("metalhost"), projects: map[string]*project{},
		client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}
	h.Metrics = Metrics{
		RescueFailedQuarantined: prometheus.NewCounter(prometheus.CounterOpts{Name: "metal_rescue_failed_quarantined_total",
			Help: "Discarded VMs whose workspace could not be saved; their disk was quarantined (page on it)."}),
		StaleSnapshotSkipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "metal_stale_snapshot_skipped_total",
			Help: "Snapshots skipped because an archive they recorded was overwritten; the project cold-booted."}),
		Exports: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "metal_exports_total",
			Help: "Archives exported from guests, by part and result."}, []string{"part", "result"}),
		CallbackForwards: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "metal_callback_forwards_total",
			Help: "Guests' async webhook callbacks the host forwarded, by outcome (forwarded, refused, error)."}, []string{"outcome"}),
	}
	h.Metrics.LFSTransfers = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "metal_lfs_transfers_total",
		Help: "Guests' large-file objects the host moved to or from object storage, by outcome (upload, download, rejected)."}, []string{"outcome"})
	h.callbacks = callback.NewForwarder(callback.NewGuard(o.CallbackAllowedNets), o.CallbackTimeout, h.log)
	h.callbacks.Observe = func(outcome string) { h.Metrics.CallbackForwards.WithLabelValues(outcome).Inc() }
	if o.Registry != nil {
		for _, c := range []prometheus.Collector{h.Metrics.RescueFailedQuarantined, h.Metrics.StaleSnapshotSkipped, h.Metrics.Exports, h.Metrics.CallbackForwards, h.Metrics.LFSTransfers} {
			if err := o.Registry.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return h, os.MkdirAll(filepath.Join(o.Dir, "quarantine"), 0o700)
}

// States of a project's VM.
const (
	StateRunning     = "running"
	StateStopped     = "stopped"
	StateSuspended   = "suspended"
	StateRescued     = "rescued"
	StateQuarantined = "quarantined"
	StateFailed      = "failed"
)

type project struct {
	id, token string
	dir       string

	mu          sync.Mutex // one export, stop or discard at a time
	vm          *vm.VM
	url         *url.URL
	relay       *relay
	bootKind    string
	startedAt   time.Time
	etags       map[string]string // fencing: the ETag this host last saw per key ("" = absent)
	lastExport  time.Time
	state       string
	lastErr     string
	stopping    bool
	discardOnce sync.Once
	discarded   chan struct{} // closed when the discard is done
	loopStop    chan struct{}
	loopDone    chan struct{}
}

func (h *Host) projectDir(id string) string { return filepath.Join(h.o.Dir, "projects", id) }
func (h *Host) diskPath(id string) string   { return filepath.Join(h.projectDir(id), "disk.ext4") }
func (h *Host) snapPath(id string) string   { return filepath.Join(h.projectDir(id), "snapshot.bin") }
func (h *Host) snapMeta(id string) string   { return filepath.Join(h.projectDir(id), "snapshot.json") }

// ValidProjectID refuses ids that could leave the host's directories.
func ValidProjectID(id string) error {
	if id == "" || len(id) > 128 {
		return errors.New("metal host: invalid project id")
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fmt.Errorf("metal host: invalid project id %q", id)
		}
	}
	return nil
}

// Ensure returns the project's running guest, booting it once however many
// callers wait.
func (h *Host) Ensure(ctx context.Context, id, token string) (wire.MetalProject, error) {
	if err := ValidProjectID(id); err != nil {
		return wire.MetalProject{}, err
	}
	if token == "" {
		return wire.MetalProject{}, errors.New("metal host: a runtime token is required")
	}
	if p := h.running(id); p != nil {
		return h.status(p), nil
	}
	ch := h.sf.DoChan(id, func() (any, error) {
		if p := h.running(id); p != nil {
			return p, nil
		}
		return h.start(context.WithoutCancel(ctx), id, token)
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return wire.MetalProject{}, r.Err
		}
		return h.status(r.Val.(*project)), nil
	case <-ctx.Done():
		return wire.MetalProject{}, ctx.Err()
	}
}

func (h *Host) running(id string) *project {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p := h.projects[id]; p != nil && p.state == StateRunning && p.vm != nil && p.vm.Alive() {
		return p
	}
	return nil
}

// Status reports a project's VM.
func (h *Host) Status(id string) wire.MetalProject {
	h.mu.Lock()
	p := h.projects[id]
	h.mu.Unlock()
	if p == nil {
		return wire.MetalProject{ProjectID: id, State: StateStopped}
	}
	return h.status(p)
}

func (h *Host) status(p *project) wire.MetalProject {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := wire.MetalProject{ProjectID: p.id, State: p.state, BootKind: p.bootKind, StartedAt: p.startedAt,
		LastExport: p.lastExport, LastError: p.lastErr}
	if p.url != nil && p.state == StateRunning {
		st.URL = p.url.String()
	}
	if p.vm != nil && p.vm.Alive() {
		st.PID = p.vm.PID()
	}
	return st
}

func (h *Host) setState(p *project, state, lastErr string) {
	h.mu.Lock()
	p.state = state
	if lastErr != "" {
		p.lastErr = lastErr
	}
	h.mu.Unlock()
}

// start boots the project's guest: from its snapshot when still current,
// else cold.
func (h *Host) start(ctx context.Context, id, token string) (*project, error) {
	h.mu.Lock()
	old := h.projects[id]
	oldRunning := old != nil && old.state == StateRunning
	h.mu.Unlock()
	if oldRunning {
		// Its VM died (running() said so): rescue its disk before a new VM
		// may take the place (or wait for the reaper doing it).
		_ = h.discard(ctx, old, "the VM exited before the next start")
	}
	p := &project{id: id, token: token, dir: h.projectDir(id), discarded: make(chan struct{})}
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return nil, err
	}
	log := h.log.With(zap.String("projectId", id))
	t0 := time.Now()
	incoming := ""
	if etags, ok := h.currentSnapshot(ctx, id, log); ok {
		incoming, p.etags, p.bootKind = h.snapPath(id), etags, "snapshot"
	} else {
		h.rescueLeftover(ctx, p, log)
		etags, err := h.coldDisk(ctx, p)
		if err != nil {
			return nil, h.failed(p, fmt.Errorf("cold boot: %w", err))
		}
		p.etags, p.bootKind = etags, "cold"
	}
	if err := h.boot(ctx, p, incoming); err != nil {
		if incoming != "" {
			log.Warn("resuming the snapshot failed; cold booting", zap.Error(err))
			h.dropSnapshot(id)
			etags, cerr := h.coldDisk(ctx, p)
			if cerr != nil {
				return nil, h.failed(p, fmt.Errorf("cold boot: %w", cerr))
			}
			p.etags, p.bootKind = etags, "cold"
			err = h.boot(ctx, p, "")
		}
		if err != nil {
			return nil, h.failed(p, err)
		}
	}
	if incoming != "" {
		h.dropSnapshot(id) // the disk moves on from here; the state file is spent
	}
	p.startedAt, p.state = time.Now(), StateRunning
	h.mu.Lock()
	h.projects[id] = p
	h.mu.Unlock()
	log.Info("guest ready", zap.String("bootKind", p.bootKind), zap.String("url", p.url.String()),
		zap.Int("pid", p.vm.PID()), zap.Duration("took", time.Since(t0)))
	p.loopStop, p.loopDone = make(chan struct{}), make(chan struct{})
	go h.exportLoop(p)
	go h.reap(p)
	go h.healthGate(p)
	return p, nil
}

func (h *Host) failed(p *project, err error) error {
	h.mu.Lock()
	if old := h.projects[p.id]; old == nil || old.state != StateRunning {
		p.state, p.lastErr = StateFailed, err.Error()
		h.projects[p.id] = p
	}
	h.mu.Unlock()
	h.log.Error("starting the guest failed", zap.String("projectId", p.id), zap.Error(err))
	return err
}

// boot starts QEMU on the project's disk and waits for the pod's /readyz.
func (h *Host) boot(ctx context.Context, p *project, incoming string) error {
	rl, err := newRelay(relayConfig{apiURL: h.o.APIURL, projectID: p.id, token: p.token, callbacks: h.callbacks,
		lfs: &lfsTransfer{store: h.o.Store, projectID: p.id, token: p.token, tmpDir: filepath.Join(p.dir, "run"), log: h.log,
			observe: func(o string) { h.Metrics.LFSTransfers.WithLabelValues(o).Inc() }}}, h.log)
	if err != nil {
		return err
	}
	port, err := localproc.FreePort(h.o.BindHost)
	if err != nil {
		rl.close()
		return err
	}
	addr := net.JoinHostPort(h.o.BindHost, strconv.Itoa(port))
	cfg := vm.Config{QEMU: h.o.QEMU, Accel: h.o.Accel, MemoryMB: h.o.MemoryMB, Kernel: h.o.Image.Kernel,
		Initrd: h.o.Image.Initrd, Disk: h.diskPath(p.id), Dir: filepath.Join(p.dir, "run"), HostAddr: addr,
		GuestPort: guest.Port, Incoming: incoming, Append: guest.KernelArg,
		GuestFwd: []vm.GuestFwd{{Addr: guest.RelayAddr, Cmd: append(append([]string(nil), h.o.PipeCommand...), rl.addr())}}}
	sctx, cancel := context.WithTimeout(ctx, h.o.StartTimeout)
	defer cancel()
	v, err := vm.Start(sctx, cfg)
	if err != nil {
		rl.close()
		return err
	}
	u := &url.URL{Scheme: "http", Host: addr}
	if err := h.waitReady(sctx, v, u, p.token); err != nil {
		v.Kill()
		rl.close()
		return fmt.Errorf("%w (console: %s)", err, localproc.Tail(cfg.ConsoleLog(), 1500))
	}
	p.vm, p.url, p.relay = v, u, rl
	return nil
}

func (h *Host) waitReady(ctx context.Context, v *vm.VM, u *url.URL, token string) error {
	wait := 20 * time.Millisecond
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u.JoinPath("/readyz").String(), nil)
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := h.client.Do(req.WithContext(cctx))
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				cancel()
				return nil
			}
		}
		cancel()
		t := time.NewTimer(wait)
		select {
		case <-v.Done():
			t.Stop()
			return fmt.Errorf("the VM exited before its agent was ready: %v", v.ExitErr())
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("the guest's agent was not ready within %s", h.o.StartTimeout)
		case <-t.C:
		}
		wait = min(wait*2, 200*time.Millisecond)
	}
}

// coldDisk builds a fresh disk: the source archive, then the data archive
// over it, as the work tree; the durable .git extracted into the staging
// directory the guest swaps in; the guest's config. It returns the ETags
// of the three archives (fencing tokens of later exports).
func (h *Host) coldDisk(ctx context.Context, p *project) (map[string]string, error) {
	staging := filepath.Join(p.dir, "staging")
	_ = os.RemoveAll(staging)
	defer os.RemoveAll(staging)
	ws := filepath.Join(staging, guest.WorkspaceRel)
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return nil, err
	}
	etags := map[string]string{}
	for _, x := range []struct{ key, dst string }{
		{objstore.SourceKey(p.id), ws},
		{objstore.DataKey(p.id), ws},
		{objstore.RepoKey(p.id), filepath.Join(staging, guest.StagingGitRel)},
	} {
		etag, err := h.hydrate(ctx, x.key, x.dst)
		if err != nil {
			return nil, err
		}
		etags[x.key] = etag
	}
	// A pod outside the host may have written increments after the archive
	// (docs/sync-modes.md §13): the guest starts from all of them.
	gitDir := filepath.Join(staging, guest.StagingGitRel)
	if man, _, err := repoarchive.GetManifest(ctx, h.o.Store, p.id); err == nil {
		if _, err := repoarchive.FetchIncrements(ctx, h.o.Store, man, gitDir, nil); err != nil {
			return nil, err
		}
		if err := repoarchive.ApplyRefs(gitDir, man); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, objstore.ErrNotExist) {
		return nil, err
	}
	cfg, err := json.Marshal(guest.Config{ProjectID: p.id, RuntimeToken: p.token, Env: h.guestEnv()})
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(staging, guest.StateRel), 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(staging, guest.ConfigRel), cfg, 0o600); err != nil {
		return nil, err
	}
	image := h.diskPath(p.id)
	if err := h.o.Tools.Create(ctx, image, staging, h.o.DiskMB); err != nil {
		return nil, err
	}
	if h.o.AfterDisk != nil {
		if err := h.o.AfterDisk(ctx, p.id, image); err != nil {
			return nil, err
		}
	}
	return etags, nil
}

// hydrate extracts one archive into dst; a missing object is not an error
// (a new project) and yields an empty ETag.
func (h *Host) hydrate(ctx context.Context, key, dst string) (string, error) {
	rc, info, err := h.o.Store.Get(ctx, key)
	if errors.Is(err, objstore.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("get %s: %w", key, err)
	}
	defer rc.Close()
	if _, err := archive.ExtractTarGz(rc, dst, archive.ExtractOptions{}); err != nil {
		return "", fmt.Errorf("extract %s: %w", key, err)
	}
	return info.ETag, nil
}

// guestEnv is the guests' extra pod settings: the host's callback allowed
// nets (so a guest's early check of a callbackUrl matches the host's
// guard), then Options.GuestEnv.
func (h *Host) guestEnv() map[string]string {
	env := map[string]string{}
	if len(h.o.CallbackAllowedNets) > 0 {
		nets := make([]string, len(h.o.CallbackAllowedNets))
		for i, n := range h.o.CallbackAllowedNets {
			nets[i] = n.String()
		}
		env["SVC_CALLBACK_ALLOWED_NETS"] = strings.Join(nets, ",")
	}
	for k, v := range h.o.GuestEnv {
		env[k] = v
	}
	return env
}
