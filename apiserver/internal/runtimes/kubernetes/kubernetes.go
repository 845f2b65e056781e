// Package kubernetes is the runtime driver of the Helm install (docs/design.md
// §7, spec 10.1.1: a project is pinned to one runtime pod at a time): one
// pod per project, rendered from the chart's runtime pod template, with the
// podagent as a native sidecar and the project's runtime token in a Secret the
// pod owns.
//
// The assignment (generation, pod name, pod IP and port, sync mode) lives in
// the store, so any API replica serves any project; an informer on the
// driver's pods keeps each replica's view current without a query to the
// Kubernetes API per request. A pod is named after the project and the
// generation: replicas racing for a project apply the same pod (server-side
// apply, one pod), and replacing a pod (restart, idle stop, a vanished or
// failed pod) advances the generation with a compare-and-set. The new pod
// starts only after the older ones are gone, so their shutdown flush (spec
// 10.2) lands before the new pod restores; a pod that disappeared without
// stopping (a lost node) is fenced by the project's ownership record, which
// every pod claims at start with its generation (SVC_POD_GENERATION), in
// every sync mode (docs/sync-modes.md §11).
package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	k8s "k8s.io/client-go/kubernetes"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/svc-dev/svc/apiserver/internal/runtimes"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/runtimetoken"
	"github.com/svc-dev/svc/shared/settings"
	"github.com/svc-dev/svc/shared/syncmode"
	"github.com/svc-dev/svc/shared/wire"
)

// Name is the driver name recorded in runtime assignments.
const Name = "kubernetes"

// FieldManager is the server-side apply manager of every replica: replicas
// apply identical objects, so they never conflict with each other.
const FieldManager = "svc-apiserver"

// Store is what the driver needs of the database.
type Store interface {
	GetRuntimeAssignment(ctx context.Context, projectID string) (store.RuntimeAssignment, error)
	// GetRuntimeAssignments reads many projects' assignments at once (the
	// idle reaper); a project with none has no key.
	GetRuntimeAssignments(ctx context.Context, projectIDs []string) (map[string]store.RuntimeAssignment, error)
	ClaimRuntime(ctx context.Context, projectID, driver, mode string) (store.RuntimeAssignment, error)
	AdvanceRuntime(ctx context.Context, projectID, driver string, from int64) (store.RuntimeAssignment, error)
	SetRuntimeEndpoint(ctx context.Context, projectID, driver string, gen int64, endpoint, instance, mode string) error
	ReserveRuntimeInstance(ctx context.Context, projectID, driver string, gen int64, instance string) (store.RuntimeAssignment, error)
}

// Options configure the driver.
type Options struct {
	Client    k8s.Interface
	Namespace string
	Template  *PodTemplate
	Store     Store
	// RuntimeSecret mints each project's runtime token; a pod receives only
	// its own project's token, in its Secret.
	RuntimeSecret []byte
	// APIURL, when set, replaces the sidecar's SVC_API_URL (an API server
	// outside the cluster: tests, operators).
	APIURL string
	// Env is set in the sidecar's environment ("NAME=value"), after the
	// template's own entries.
	Env []string
	// StartTimeout bounds a cold start: pod creation to Ready and a 200 on
	// the podagent's /readyz (default 2 min).
	StartTimeout time.Duration
	// IdleTimeout stops pods no request used for that long (default 30
	// min; negative: never).
	IdleTimeout time.Duration
	// ReapInterval is how often idle and replaced pods are looked for
	// (default: a quarter of IdleTimeout, at most a minute).
	ReapInterval time.Duration
	// RetryAfter is told to clients after a failed cold start (default 10 s).
	RetryAfter time.Duration
	// CreateQPS and CreateBurst rate-limit pod creations on this replica
	// (default 20/s, burst 40): a rush of first messages queues for its
	// turn instead of flooding the Kubernetes API. CreateQueue is how many
	// creations may wait (default 500); beyond it, or when a creation's turn
	// is later than half of StartTimeout, the start answers 503 with the
	// wait as Retry-After (docs/scale.md).
	CreateQPS   float64
	CreateBurst int
	CreateQueue int
	// PoolSize is how many spare pods the warm pool keeps in the namespace
	// (pool.go; 0: none, every cold start creates its pod).
	PoolSize int
	Log      *zap.Logger
}

// Driver is the kubernetes runtime driver.
type Driver struct {
	o      Options
	log    *zap.Logger
	pods   listerscorev1.PodLister
	client *http.Client
	sf     singleflight.Group
	gate   *createGate
	m      *metrics
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every pod event
	lastUsed map[string]time.Time
	inFlight map[string]int // requests to each pod now proxied by this replica
	marked   map[string]time.Time
	lastErr  map[string]string
	warm     map[string]bool // spares that answered /readyz unassigned
}

// New starts the informer on the driver's pods in the runtime namespace and
// waits for its first list: a cluster it cannot reach (or a namespace it may
// not watch) is a start-up error, not a 503 per request.
func New(ctx context.Context, o Options) (*Driver, error) { return newDriverWith(ctx, o, false) }

// newDriverWith is New; full keeps whole pods in the informer (the scale
// benchmark's "before").
func newDriverWith(ctx context.Context, o Options, full bool) (*Driver, error) {
	if o.Client == nil || o.Template == nil || o.Store == nil || o.Namespace == "" {
		return nil, errors.New("kubernetes runtime: client, namespace, pod template and store are required")
	}
	if len(o.RuntimeSecret) == 0 {
		return nil, errors.New("kubernetes runtime: SVC_RUNTIME_AUTH_SECRET is not set: no runtime token can be minted")
	}
	o.StartTimeout = settings.PositiveOr(o.StartTimeout, 2*time.Minute)
	if o.IdleTimeout == 0 {
		o.IdleTimeout = 30 * time.Minute
	}
	o.ReapInterval = settings.PositiveOr(o.ReapInterval, min(max(o.IdleTimeout/4, time.Second), time.Minute))
	o.RetryAfter = settings.PositiveOr(o.RetryAfter, 10*time.Second)
	if o.CreateQPS <= 0 {
		o.CreateQPS = 20
	}
	o.CreateBurst = settings.PositiveOr(o.CreateBurst, 40)
	o.CreateQueue = settings.PositiveOr(o.CreateQueue, 500)
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	d := &Driver{o: o, log: o.Log.Named("runtime.kubernetes"), changed: make(chan struct{}),
		gate: newCreateGate(o.CreateQPS, o.CreateBurst, o.CreateQueue), m: newMetrics(),
		client:   &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
		lastUsed: map[string]time.Time{}, inFlight: map[string]int{}, marked: map[string]time.Time{}, lastErr: map[string]string{},
		warm: map[string]bool{}, done: make(chan struct{})}
	factory := informers.NewSharedInformerFactoryWithOptions(o.Client, 0, informers.WithNamespace(o.Namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.LabelSelector = LabelManagedBy + "=" + ManagedBy
		}))
	inf := factory.Core().V1().Pods()
	// The cache keeps lean pods (no managed fields, no spec beyond the
	// sidecar's port): docs/scale.md measures the saving.
	if !full {
		if err := inf.Informer().SetTransform(leanPod); err != nil {
			return nil, err
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { d.notify() },
		UpdateFunc: func(any, any) { d.notify() },
		DeleteFunc: func(any) { d.notify() },
	}); err != nil {
		return nil, err
	}
	d.pods = inf.Lister()
	runCtx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	factory.Start(runCtx.Done())
	syncCtx, syncCancel := context.WithTimeout(ctx, 30*time.Second)
	defer syncCancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), inf.Informer().HasSynced) {
		cancel()
		factory.Shutdown()
		return nil, fmt.Errorf("kubernetes runtime: could not list pods in namespace %q within 30s (cluster reachable? RBAC allows list/watch pods?)", o.Namespace)
	}
	pooled := make(chan struct{})
	go func() {
		defer close(pooled)
		if o.PoolSize > 0 {
			d.poolLoop(runCtx)
		} else {
			d.refill(runCtx) // spares of a pool since turned off go
		}
	}()
	go func() {
		defer close(d.done)
		d.reapLoop(runCtx)
		<-pooled
		factory.Shutdown()
	}()
	return d, nil
}

// Name implements runtimes.Driver.
func (d *Driver) Name() string { return Name }

// PodName is the name of generation gen of a project's pod (and its Secret).
func PodName(projectID string, gen int64) string {
	return "svc-rt-" + dnsLabel(projectID) + "-g" + strconv.FormatInt(gen, 10)
}

// Ensure implements runtimes.Driver (without an assignment at hand).
func (d *Driver) Ensure(ctx context.Context, p store.Project) (runtimes.Endpoint, error) {
	a, err := d.o.Store.GetRuntimeAssignment(ctx, p.ID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return runtimes.Endpoint{}, err
	}
	var cur *store.RuntimeAssignment
	if err == nil && a.Driver == Name {
		cur = &a
	}
	return d.EnsureAssigned(ctx, p, cur)
}

// errReplaced: the assignment moved on while this replica started a pod.
var errReplaced = errors.New("the runtime assignment moved to a newer generation")

// EnsureAssigned implements runtimes.AssignmentOwner: the project's current
// pod when it is Ready (no Kubernetes or database call beyond the Router's
// read of the assignment), else a cold start of the assignment's generation.
func (d *Driver) EnsureAssigned(ctx context.Context, p store.Project, cur *store.RuntimeAssignment) (runtimes.Endpoint, error) {
	began := time.Now()
	mode := p.CloudSyncMode
	if mode == "" {
		mode = syncmode.Default
	}
	var a store.RuntimeAssignment
	if cur != nil && cur.Generation > 0 {
		a = *cur
	} else {
		var err error
		if a, err = d.o.Store.ClaimRuntime(ctx, p.ID, Name, string(mode)); err != nil {
			return runtimes.Endpoint{}, err
		}
		if a.Driver != Name {
			return runtimes.Endpoint{}, runtimes.ErrOffline // paired meanwhile
		}
	}
	for attempt := 0; attempt < 3; attempt++ {
		name := PodName(p.ID, a.Generation)
		pod := d.podOf(a)
		if pod != nil && podReady(pod) {
			if ep, u, err := d.endpoint(p.ID, pod); err == nil && a.Endpoint == u {
				d.touch(pod)
				d.m.route.Observe(time.Since(began).Seconds())
				return ep, nil
			}
		}
		if pod != nil && (pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodFailed ||
			pod.Status.Phase == corev1.PodSucceeded) {
			// Gone or going (evicted, deleted, idle-stopped): the next
			// generation replaces it.
			next, err := d.o.Store.AdvanceRuntime(ctx, p.ID, Name, a.Generation)
			if err != nil {
				return runtimes.Endpoint{}, err
			}
			a = next
			continue
		}
		gen := a.Generation
		ch := d.sf.DoChan(name, func() (any, error) { return d.start(p, mode, gen) })
		select {
		case r := <-ch:
			if errors.Is(r.Err, errReplaced) || errors.Is(r.Err, errClaimLost) {
				// A claimed spare that died before it served was
				// replaced like a failed pod: the next generation gets
				// another spare, or a pod of its own.
				next, err := d.o.Store.GetRuntimeAssignment(ctx, p.ID)
				if err != nil {
					return runtimes.Endpoint{}, err
				}
				a = next
				continue
			}
			if r.Err != nil {
				return runtimes.Endpoint{}, r.Err
			}
			return r.Val.(runtimes.Endpoint), nil
		case <-ctx.Done():
			return runtimes.Endpoint{}, ctx.Err()
		}
	}
	return runtimes.Endpoint{}, d.startError(p.ID, errors.New("the project's runtime was replaced while it started, three times"))
}

// errClaimLost: a claimed spare failed before it served the project; the
// generation was advanced and the request tries again.
var errClaimLost = errors.New("the claimed spare pod failed before it served")

// start brings generation gen of the project's pod to Ready (claiming a
// spare of the warm pool, or creating the pod, unless the assignment names
// one already) and records its endpoint. It is not bound to the request
// that triggered it: other requests wait for the same start.
func (d *Driver) start(p store.Project, mode syncmode.Mode, gen int64) (runtimes.Endpoint, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d.o.StartTimeout)
	defer cancel()
	began := time.Now()
	ph := d.m.phases(began)
	name := PodName(p.ID, gen)
	claimed := false
	fail := func(err error) (runtimes.Endpoint, error) {
		d.m.starts.WithLabelValues(startFailed).Inc()
		d.log.Error("runtime pod start failed", zap.String("projectId", p.ID), zap.String("pod", name), zap.Error(err))
		// The next request starts a fresh pod: this one is replaced.
		if _, aerr := d.o.Store.AdvanceRuntime(context.Background(), p.ID, Name, gen); aerr != nil {
			d.log.Warn("advancing the runtime generation failed", zap.String("projectId", p.ID), zap.Error(aerr))
		}
		go d.deletePod(context.Background(), name, "")
		if claimed {
			return runtimes.Endpoint{}, fmt.Errorf("pod %s: %w: %w", name, errClaimLost, err)
		}
		return runtimes.Endpoint{}, d.startError(p.ID, fmt.Errorf("pod %s: %w", name, err))
	}

	// The assignment names the generation's pod once a replica chose it:
	// a spare another replica claimed is waited for, not duplicated.
	a, err := d.o.Store.GetRuntimeAssignment(ctx, p.ID)
	if err != nil {
		return runtimes.Endpoint{}, err
	}
	if a.Driver != Name || a.Generation != gen {
		return runtimes.Endpoint{}, errReplaced
	}
	if a.Instance != "" {
		name = a.Instance
	}
	pod, _ := d.pods.Pods(d.o.Namespace).Get(name)
	if pod == nil && name != PodName(p.ID, gen) {
		// The assignment names a claimed spare this replica does not see:
		// gone (deleted, its node lost) when the API server agrees, and
		// the next generation replaces it.
		if _, err := d.o.Client.CoreV1().Pods(d.o.Namespace).Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			if _, err := d.o.Store.AdvanceRuntime(ctx, p.ID, Name, gen); err != nil {
				return runtimes.Endpoint{}, err
			}
			return runtimes.Endpoint{}, errReplaced
		}
	}
	if pod == nil && name == PodName(p.ID, gen) {
		// Older generations stop first, so their final flush (spec 10.2)
		// lands before this pod restores the workspace.
		if err := d.retireOlder(ctx, p.ID, gen); err != nil {
			return fail(err)
		}
		if a.Instance == "" && d.o.PoolSize > 0 {
			sp, winner, err := d.claimSpare(ctx, p, mode, gen)
			switch {
			case err == nil:
				pod, name, claimed = sp, sp.Name, true
				d.m.claims.Inc()
				ph.mark(phaseClaimed)
			case errors.Is(err, errReplaced):
				return runtimes.Endpoint{}, err
			case errors.Is(err, errNoSpare):
				d.m.misses.Inc()
			case winner != "":
				name = winner // another replica chose the generation's pod
			default:
				return fail(err)
			}
		}
	}
	if pod == nil && name == PodName(p.ID, gen) {
		// A rush of creations takes turns; one whose turn is too far away
		// is told when to come back (503 + Retry-After), the generation
		// unchanged, nothing created.
		if err := d.gate.wait(ctx, d.o.StartTimeout/2); err != nil {
			var full *errGateFull
			if errors.As(err, &full) {
				d.m.starts.WithLabelValues(startThrottled).Inc()
				return runtimes.Endpoint{}, &runtimes.StartError{ProjectID: p.ID, Err: err,
					RetryAfter: max(full.After, time.Second), Reason: "too many runtime pods are starting; retry later"}
			}
			return fail(err)
		}
		ph.mark(phaseQueued)
		if a, err := d.o.Store.ReserveRuntimeInstance(ctx, p.ID, Name, gen, name); errors.Is(err, store.ErrStaleGeneration) {
			return runtimes.Endpoint{}, errReplaced
		} else if err != nil {
			return fail(err)
		} else if a.Instance != name {
			name = a.Instance // a spare another replica claimed meanwhile
		}
		if name == PodName(p.ID, gen) {
			var err error
			if pod, err = d.applyPod(ctx, p, mode, gen); err != nil {
				if errors.Is(err, errReplaced) {
					return runtimes.Endpoint{}, err
				}
				return fail(err)
			}
			ph.mark(phaseCreated)
		}
	}
	if pod != nil && name == PodName(p.ID, gen) {
		if err := d.applyTokenSecret(ctx, pod, p.ID, runtimetoken.Mint(d.o.RuntimeSecret, p.ID)); err != nil {
			return fail(fmt.Errorf("runtime token Secret: %w", err))
		}
	}
	if claimed {
		if err := d.handOver(ctx, p, mode, gen, pod); err != nil {
			return fail(fmt.Errorf("claiming the spare: %w", err))
		}
	}
	ep, u, err := d.waitReady(ctx, p.ID, gen, name, ph)
	if err != nil {
		return fail(err)
	}
	ph.mark(phaseProbed)
	podMode := string(mode)
	if cur, _ := d.pods.Pods(d.o.Namespace).Get(name); cur != nil && cur.Annotations[AnnotationSyncMode] != "" {
		podMode = cur.Annotations[AnnotationSyncMode]
	}
	if err := d.o.Store.SetRuntimeEndpoint(context.Background(), p.ID, Name, gen, u, name, podMode); err != nil {
		if errors.Is(err, store.ErrStaleGeneration) {
			return runtimes.Endpoint{}, errReplaced
		}
		return fail(fmt.Errorf("recording the assignment: %w", err))
	}
	d.mu.Lock()
	delete(d.lastErr, p.ID)
	d.mu.Unlock()
	d.m.starts.WithLabelValues(startReady).Inc()
	d.log.Info("runtime pod ready", zap.String("projectId", p.ID), zap.String("pod", name), zap.String("url", u),
		zap.String("mode", podMode), zap.Bool("claimed", claimed), zap.Duration("took", time.Since(began)))
	return ep, nil
}

// podOf is the pod the assignment names (its instance, else the
// generation's own name) when it is the project's pod of that generation.
func (d *Driver) podOf(a store.RuntimeAssignment) *corev1.Pod {
	name := a.Instance
	if name == "" {
		name = PodName(a.ProjectID, a.Generation)
	}
	pod, _ := d.pods.Pods(d.o.Namespace).Get(name)
	if pod == nil || pod.Labels[LabelProject] != a.ProjectID || podGeneration(pod) != a.Generation {
		return nil
	}
	return pod
}

func (d *Driver) startError(projectID string, err error) error {
	d.mu.Lock()
	d.lastErr[projectID] = err.Error()
	d.mu.Unlock()
	// The reason names only the pod and its state (no secrets): the 503
	// carries it.
	return &runtimes.StartError{ProjectID: projectID, RetryAfter: d.o.RetryAfter, Err: err, Reason: err.Error()}
}

// applyPod renders the project's pod from the template with the project's
// environment of now (spec 3.1: the mode at assignment) and server-side
// applies it. A pod of that name that already exists (another replica, an
// older mode) is kept as it is.
func (d *Driver) applyPod(ctx context.Context, p store.Project, mode syncmode.Mode, gen int64) (*corev1.Pod, error) {
	// The generation must still be current: a restart may have moved on.
	if a, err := d.o.Store.GetRuntimeAssignment(ctx, p.ID); err != nil {
		return nil, err
	} else if a.Driver != Name || a.Generation != gen {
		return nil, errReplaced
	}
	name := PodName(p.ID, gen)
	pod, err := d.o.Template.Render(TemplateData{PodName: name, Namespace: d.o.Namespace, ProjectID: p.ID,
		WorkspaceID: p.WorkspaceID, SyncMode: string(mode), TokenSecretName: name})
	if err != nil {
		return nil, err
	}
	pod.Name, pod.Namespace = name, d.o.Namespace
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Labels[LabelManagedBy] = ManagedBy
	pod.Labels[LabelProject] = p.ID
	pod.Labels[LabelWorkspace] = p.WorkspaceID
	pod.Annotations[AnnotationSyncMode] = string(mode)
	pod.Annotations[AnnotationGeneration] = strconv.FormatInt(gen, 10)
	c, err := sidecar(pod)
	if err != nil {
		return nil, err
	}
	setEnv(c, "SVC_PROJECT_ID", p.ID)
	setEnv(c, syncmode.EnvVar, string(mode))
	// The pod's claim on the project carries its generation: a replaced pod
	// that restarts never takes the project back from a newer generation
	// (docs/sync-modes.md §11).
	setEnv(c, "SVC_POD_GENERATION", strconv.FormatInt(gen, 10))
	if d.o.APIURL != "" {
		setEnv(c, "SVC_API_URL", d.o.APIURL)
	}
	for _, kv := range d.o.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			setEnv(c, k, v)
		}
	}
	body, err := applyBody(pod)
	if err != nil {
		return nil, err
	}
	force := true
	out, err := d.o.Client.CoreV1().Pods(d.o.Namespace).Patch(ctx, name, types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: FieldManager, Force: &force})
	if err != nil && (apierrors.IsInvalid(err) || apierrors.IsConflict(err) || apierrors.IsForbidden(err)) {
		// The pod exists with another spec (pods are immutable): use it.
		if existing, gerr := d.o.Client.CoreV1().Pods(d.o.Namespace).Get(ctx, name, metav1.GetOptions{}); gerr == nil {
			return existing, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("applying the pod: %w", err)
	}
	return out, nil
}

// applyTokenSecret applies the Secret of pod (named after it) holding
// token under "token" — a project's runtime token, or a spare's bootstrap
// token — owned by pod (the garbage collector deletes it with the pod).
func (d *Driver) applyTokenSecret(ctx context.Context, pod *corev1.Pod, projectID, token string) error {
	lbl := map[string]string{LabelManagedBy: ManagedBy}
	if projectID != "" {
		lbl[LabelProject] = projectID
	}
	s := corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: d.o.Namespace, Labels: lbl,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}}},
		Type:       corev1.SecretTypeOpaque,
		StringData: map[string]string{"token": token},
	}
	body, err := applyBody(&s)
	if err != nil {
		return err
	}
	force := true
	_, err = d.o.Client.CoreV1().Secrets(d.o.Namespace).Patch(ctx, s.Name, types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: FieldManager, Force: &force})
	return err
}

// applyBody is obj as an apply configuration: JSON without status and
// server-set metadata.
func applyBody(obj any) ([]byte, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	delete(m, "status")
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	return json.Marshal(m)
}

// waitReady waits, on informer events, until the pod is Ready and its
// podagent answers /readyz as the project's pod of generation gen, or fails
// with the pod's reason.
func (d *Driver) waitReady(ctx context.Context, projectID string, gen int64, name string, ph *phases) (runtimes.Endpoint, string, error) {
	probeWait := 20 * time.Millisecond
	var last *corev1.Pod
	var wrongPod error // the last answer of another pod at this pod's address
	for {
		changed := d.changedCh()
		pod, _ := d.pods.Pods(d.o.Namespace).Get(name)
		var retry <-chan time.Time
		if pod == nil && last != nil {
			return runtimes.Endpoint{}, "", errors.New("the pod vanished")
		}
		if pod != nil {
			last = pod
			ph.observe(pod)
			if why := podFailure(pod); why != "" {
				return runtimes.Endpoint{}, "", errors.New(why)
			}
			if podReady(pod) {
				ep, u, err := d.endpoint(projectID, pod)
				if err != nil {
					return runtimes.Endpoint{}, "", err
				}
				err = d.probe(ctx, projectID, gen, u)
				if err == nil {
					return ep, u, nil
				}
				var wrong *wire.WrongPodError
				if errors.As(err, &wrong) {
					// Another pod answers at this pod's address (a recycled
					// IP whose previous pod has not let go of it yet): the
					// project's messages are never routed there, and the
					// pod is asked again until its own podagent answers or
					// the start times out.
					wrongPod = err
				}
				// Ready for Kubernetes but not reachable from here yet (or,
				// a claimed spare, still cold-starting: its readiness is
				// the podagent's own, so it is asked more often).
				t := time.NewTimer(probeWait)
				defer t.Stop()
				retry = t.C
				ceiling := 500 * time.Millisecond
				if pod.Annotations[AnnotationSpare] != "" {
					ceiling = 50 * time.Millisecond
				}
				probeWait = min(probeWait*2, ceiling)
			}
		}
		select {
		case <-changed:
		case <-retry:
		case <-ctx.Done():
			if wrongPod != nil {
				return runtimes.Endpoint{}, "", fmt.Errorf("not Ready within %s: %w", d.o.StartTimeout, wrongPod)
			}
			return runtimes.Endpoint{}, "", fmt.Errorf("not Ready within %s (%s)", d.o.StartTimeout, podPending(last))
		}
	}
}

// probe is nil when the podagent at base answers /readyz as the project's
// pod of generation gen.
func (d *Driver) probe(ctx context.Context, projectID string, gen int64, base string) error {
	pod := internalapi.PodClient{BaseURL: base, HTTP: d.client, ProjectID: projectID, Generation: gen}
	return pod.Ready(ctx)
}

// endpoint is how the API reaches pod: its IP and the sidecar's port.
func (d *Driver) endpoint(projectID string, pod *corev1.Pod) (runtimes.Endpoint, string, error) {
	c, err := sidecar(pod)
	if err != nil {
		return runtimes.Endpoint{}, "", err
	}
	u := &url.URL{Scheme: "http", Host: net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(c.Ports[0].ContainerPort)))}
	return runtimes.Endpoint{URL: u, Token: runtimetoken.Mint(d.o.RuntimeSecret, projectID),
		Hold: func() func() { return d.hold(pod) }}, u.String(), nil
}

// retireOlder deletes the project's pods of generations before gen and
// waits until they are gone.
func (d *Driver) retireOlder(ctx context.Context, projectID string, gen int64) error {
	for {
		changed := d.changedCh()
		older := d.projectPods(projectID, func(g int64) bool { return g < gen })
		if len(older) == 0 {
			return nil
		}
		for _, pod := range older {
			if pod.DeletionTimestamp == nil {
				d.log.Info("stopping the replaced runtime pod", zap.String("projectId", projectID), zap.String("pod", pod.Name))
				d.deletePod(ctx, pod.Name, pod.UID)
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("the replaced pod %s did not stop within %s", older[0].Name, d.o.StartTimeout)
		}
	}
}

func (d *Driver) projectPods(projectID string, keep func(gen int64) bool) []*corev1.Pod {
	pods, _ := d.pods.Pods(d.o.Namespace).List(labels.SelectorFromSet(labels.Set{LabelProject: projectID}))
	var out []*corev1.Pod
	for _, p := range pods {
		if keep(podGeneration(p)) {
			out = append(out, p)
		}
	}
	return out
}

// deletePod deletes a pod gracefully (its own terminationGracePeriodSeconds
// covers the shutdown flushes); uid, when set, guards against deleting a
// newer pod of the same name.
func (d *Driver) deletePod(ctx context.Context, name string, uid types.UID) {
	opts := metav1.DeleteOptions{}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	err := d.o.Client.CoreV1().Pods(d.o.Namespace).Delete(ctx, name, opts)
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		d.log.Warn("deleting a runtime pod failed", zap.String("pod", name), zap.Error(err))
	}
}

func (d *Driver) notify() {
	d.mu.Lock()
	close(d.changed)
	d.changed = make(chan struct{})
	d.mu.Unlock()
}

func (d *Driver) changedCh() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.changed
}

// Stop implements runtimes.Driver: the project's pods stop (gracefully) and
// the next request starts the next generation.
func (d *Driver) Stop(ctx context.Context, projectID string) error {
	a, err := d.o.Store.GetRuntimeAssignment(ctx, projectID)
	if err == nil && a.Driver == Name {
		if _, err := d.o.Store.AdvanceRuntime(ctx, projectID, Name, a.Generation); err != nil {
			return err
		}
	}
	for _, pod := range d.projectPods(projectID, func(int64) bool { return true }) {
		if pod.DeletionTimestamp == nil {
			d.deletePod(ctx, pod.Name, pod.UID)
		}
	}
	return nil
}

// Status implements runtimes.Driver: the current generation's pod as this
// replica's informer sees it.
func (d *Driver) Status(ctx context.Context, projectID string) (runtimes.Status, error) {
	st := runtimes.Status{Driver: Name, State: runtimes.StateStopped}
	d.mu.Lock()
	st.LastError = d.lastErr[projectID]
	d.mu.Unlock()
	a, err := d.o.Store.GetRuntimeAssignment(ctx, projectID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return st, err
	}
	if err == nil && a.Driver == Name && a.Generation > 0 {
		st.Restarts = int(a.Generation - 1)
		if pod := d.podOf(a); pod != nil {
			st.State, st.StartedAt = runtimes.StateStarting, pod.CreationTimestamp.Time
			if podReady(pod) {
				st.State, st.Endpoint = runtimes.StateRunning, a.Endpoint
			}
		}
	}
	if st.State == runtimes.StateStopped && st.LastError != "" {
		st.State = runtimes.StateFailed
	}
	return st, nil
}

// Close stops the informer and the idle reaper; pods outlive API replicas.
func (d *Driver) Close(context.Context) error {
	d.cancel()
	<-d.done
	return nil
}

// Running implements runtimes.Finder: the current generation's pod when it
// is Ready, from this replica's informer. Nothing is created, and the
// endpoint carries no Hold: a request through it (a health poll) is not a
// use that keeps the pod from its idle stop.
func (d *Driver) Running(ctx context.Context, p store.Project) (runtimes.Endpoint, bool, error) {
	a, err := d.o.Store.GetRuntimeAssignment(ctx, p.ID)
	if errors.Is(err, store.ErrNotFound) {
		return runtimes.Endpoint{}, false, nil
	}
	if err != nil {
		return runtimes.Endpoint{}, false, err
	}
	if a.Driver != Name || a.Generation == 0 {
		return runtimes.Endpoint{}, false, nil
	}
	pod := d.podOf(a)
	if pod == nil || pod.DeletionTimestamp != nil || !podReady(pod) {
		return runtimes.Endpoint{}, false, nil
	}
	ep, u, err := d.endpoint(p.ID, pod)
	if err != nil || u != a.Endpoint {
		return runtimes.Endpoint{}, false, nil
	}
	ep.Hold = nil
	return ep, true, nil
}

// RetryHint is the Retry-After told after a failed cold start.
func (d *Driver) RetryHint() time.Duration { return d.o.RetryAfter }
