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
	"io"
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
	"github.com/svc-dev/svc/shared/runtimetoken"
	"github.com/svc-dev/svc/shared/settings"
	"github.com/svc-dev/svc/shared/syncmode"
)

// Name is the driver name recorded in runtime assignments.
const Name = "kubernetes"

// FieldManager is the server-side apply manager of every replica: replicas
// apply identical objects, so they never conflict with each other.
const FieldManager = "svc-apiserver"

// Store is what the driver needs of the database.
type Store interface {
	GetRuntimeAssignment(ctx context.Context, projectID string) (store.RuntimeAssignment, error)
	ClaimRuntime(ctx context.Context, projectID, driver, mode string) (store.RuntimeAssignment, error)
	AdvanceRuntime(ctx context.Context, projectID, driver string, from int64) (store.RuntimeAssignment, error)
	SetRuntimeEndpoint(ctx context.Context, projectID, driver string, gen int64, endpoint, instance, mode string) error
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
	Log        *zap.Logger
}

// Driver is the kubernetes runtime driver.
type Driver struct {
	o      Options
	log    *zap.Logger
	pods   listerscorev1.PodLister
	client *http.Client
	sf     singleflight.Group
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every pod event
	lastUsed map[string]time.Time
	inFlight map[string]int // requests to each pod now proxied by this replica
	marked   map[string]time.Time
	lastErr  map[string]string
}

// New starts the informer on the driver's pods in the runtime namespace and
// waits for its first list: a cluster it cannot reach (or a namespace it may
// not watch) is a start-up error, not a 503 per request.
func New(ctx context.Context, o Options) (*Driver, error) {
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
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	d := &Driver{o: o, log: o.Log.Named("runtime.kubernetes"), changed: make(chan struct{}),
		client:   &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
		lastUsed: map[string]time.Time{}, inFlight: map[string]int{}, marked: map[string]time.Time{}, lastErr: map[string]string{},
		done: make(chan struct{})}
	factory := informers.NewSharedInformerFactoryWithOptions(o.Client, 0, informers.WithNamespace(o.Namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.LabelSelector = LabelManagedBy + "=" + ManagedBy
		}))
	inf := factory.Core().V1().Pods()
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
	go func() {
		defer close(d.done)
		d.reapLoop(runCtx)
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
		pod, _ := d.pods.Pods(d.o.Namespace).Get(name)
		if pod != nil && podReady(pod) {
			if ep, u, err := d.endpoint(p.ID, pod); err == nil && a.Endpoint == u {
				d.touch(pod)
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
			if errors.Is(r.Err, errReplaced) {
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

// start brings generation gen of the project's pod to Ready (creating it
// unless it exists) and records its endpoint. It is not bound to the request
// that triggered it: other requests wait for the same start.
func (d *Driver) start(p store.Project, mode syncmode.Mode, gen int64) (runtimes.Endpoint, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d.o.StartTimeout)
	defer cancel()
	began := time.Now()
	name := PodName(p.ID, gen)
	fail := func(err error) (runtimes.Endpoint, error) {
		d.log.Error("runtime pod start failed", zap.String("projectId", p.ID), zap.String("pod", name), zap.Error(err))
		// The next request starts a fresh pod: this one is replaced.
		if _, aerr := d.o.Store.AdvanceRuntime(context.Background(), p.ID, Name, gen); aerr != nil {
			d.log.Warn("advancing the runtime generation failed", zap.String("projectId", p.ID), zap.Error(aerr))
		}
		go d.deletePod(context.Background(), name, "")
		return runtimes.Endpoint{}, d.startError(p.ID, fmt.Errorf("pod %s: %w", name, err))
	}

	pod, _ := d.pods.Pods(d.o.Namespace).Get(name)
	if pod == nil {
		// Older generations stop first, so their final flush (spec 10.2)
		// lands before this pod restores the workspace.
		if err := d.retireOlder(ctx, p.ID, gen); err != nil {
			return fail(err)
		}
		var err error
		if pod, err = d.applyPod(ctx, p, mode, gen); err != nil {
			if errors.Is(err, errReplaced) {
				return runtimes.Endpoint{}, err
			}
			return fail(err)
		}
	}
	if err := d.applySecret(ctx, p.ID, pod); err != nil {
		return fail(fmt.Errorf("runtime token Secret: %w", err))
	}
	ep, u, err := d.waitReady(ctx, p.ID, name)
	if err != nil {
		return fail(err)
	}
	podMode := pod.Annotations[AnnotationSyncMode]
	if err := d.o.Store.SetRuntimeEndpoint(context.Background(), p.ID, Name, gen, u, name, podMode); err != nil {
		if errors.Is(err, store.ErrStaleGeneration) {
			return runtimes.Endpoint{}, errReplaced
		}
		return fail(fmt.Errorf("recording the assignment: %w", err))
	}
	d.mu.Lock()
	delete(d.lastErr, p.ID)
	d.mu.Unlock()
	d.log.Info("runtime pod ready", zap.String("projectId", p.ID), zap.String("pod", name), zap.String("url", u),
		zap.String("mode", podMode), zap.Duration("took", time.Since(began)))
	return ep, nil
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

// applySecret applies the project's runtime-token Secret, owned by pod (the
// garbage collector deletes it with the pod).
func (d *Driver) applySecret(ctx context.Context, projectID string, pod *corev1.Pod) error {
	s := corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: d.o.Namespace,
			Labels:          map[string]string{LabelManagedBy: ManagedBy, LabelProject: projectID},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}}},
		Type:       corev1.SecretTypeOpaque,
		StringData: map[string]string{"token": runtimetoken.Mint(d.o.RuntimeSecret, projectID)},
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
// podagent answers /readyz, or fails with the pod's reason.
func (d *Driver) waitReady(ctx context.Context, projectID, name string) (runtimes.Endpoint, string, error) {
	probeWait := 20 * time.Millisecond
	var last *corev1.Pod
	for {
		changed := d.changedCh()
		pod, _ := d.pods.Pods(d.o.Namespace).Get(name)
		var retry <-chan time.Time
		if pod != nil {
			last = pod
			if why := podFailure(pod); why != "" {
				return runtimes.Endpoint{}, "", errors.New(why)
			}
			if podReady(pod) {
				ep, u, err := d.endpoint(projectID, pod)
				if err != nil {
					return runtimes.Endpoint{}, "", err
				}
				if d.probe(ctx, u) {
					return ep, u, nil
				}
				// Ready for Kubernetes but not reachable from here yet.
				t := time.NewTimer(probeWait)
				defer t.Stop()
				retry = t.C
				probeWait = min(probeWait*2, 500*time.Millisecond)
			}
		}
		select {
		case <-changed:
		case <-retry:
		case <-ctx.Done():
			return runtimes.Endpoint{}, "", fmt.Errorf("not Ready within %s (%s)", d.o.StartTimeout, podPending(last))
		}
	}
}

func (d *Driver) probe(ctx context.Context, base string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
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
		if pod, _ := d.pods.Pods(d.o.Namespace).Get(PodName(projectID, a.Generation)); pod != nil {
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
	pod, _ := d.pods.Pods(d.o.Namespace).Get(PodName(p.ID, a.Generation))
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
