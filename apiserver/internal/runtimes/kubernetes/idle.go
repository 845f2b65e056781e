package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/wait"
)

// Idle stop: each replica remembers when it last served a pod and stamps it
// on the pod (annotation svc.dev/last-used, at most every tenth of the idle
// time), so every replica's informer sees the latest use of any replica. A
// request counts as a use when it starts and again when it ends, and a pod
// with requests in flight on a replica is not idle: that replica's reaper
// keeps stamping it instead, so no replica stops it under a long request. A
// reaper on every replica stops pods unused for IdleTimeout, and pods a
// newer generation replaced; deleting a pod runs the podagent's graceful
// shutdown (spec 10.2) within the pod's terminationGracePeriodSeconds.

func (d *Driver) touch(pod *corev1.Pod) {
	if d.o.IdleTimeout < 0 {
		return
	}
	now := time.Now()
	d.mu.Lock()
	d.lastUsed[pod.Name] = now
	stamp := now.Sub(d.marked[pod.Name]) > d.o.IdleTimeout/10
	if stamp {
		d.marked[pod.Name] = now
	}
	d.mu.Unlock()
	if stamp {
		go d.stampLastUsed(pod.Name, pod.UID, now)
	}
}

// hold counts one request to pod in flight until the returned function is
// called (once; later calls do nothing); the request's end is a use.
func (d *Driver) hold(pod *corev1.Pod) func() {
	d.mu.Lock()
	d.inFlight[pod.Name]++
	d.mu.Unlock()
	return sync.OnceFunc(func() {
		d.mu.Lock()
		if d.inFlight[pod.Name]--; d.inFlight[pod.Name] <= 0 {
			delete(d.inFlight, pod.Name)
		}
		d.mu.Unlock()
		d.touch(pod)
	})
}

func (d *Driver) busy(podName string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.inFlight[podName] > 0
}

func (d *Driver) stampLastUsed(name string, uid types.UID, at time.Time) {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         uid,
		"annotations": map[string]string{AnnotationLastUsed: at.UTC().Format(time.RFC3339Nano)}}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := d.o.Client.CoreV1().Pods(d.o.Namespace).Patch(ctx, name, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
		d.log.Debug("stamping the last use of a runtime pod failed", zap.String("pod", name), zap.Error(err))
	}
}

// lastUse is the latest use of pod any replica reported, or its creation
// (or its claim, for a spare of the warm pool).
func (d *Driver) lastUse(pod *corev1.Pod) time.Time {
	last := pod.CreationTimestamp.Time
	// A claimed spare was created long before its project used it: its
	// claim is its first use.
	for _, ann := range []string{AnnotationLastUsed, AnnotationClaimedAt} {
		if t, err := time.Parse(time.RFC3339Nano, pod.Annotations[ann]); err == nil && t.After(last) {
			last = t
		}
	}
	d.mu.Lock()
	if t := d.lastUsed[pod.Name]; t.After(last) {
		last = t
	}
	d.mu.Unlock()
	return last
}

func (d *Driver) reapLoop(ctx context.Context) {
	wait.Every(ctx, d.o.ReapInterval, func(ctx context.Context) { d.reap(ctx, time.Now()) })
}

// reap stops idle pods and pods of replaced generations once. It reads the
// assignments of all the projects whose pods it sees in one statement per
// batch of project ids (GetRuntimeAssignments), not one per pod.
func (d *Driver) reap(ctx context.Context, now time.Time) {
	pods, _ := d.pods.Pods(d.o.Namespace).List(labels.Everything())
	seen := map[string]bool{}
	var candidates []*corev1.Pod
	var projectIDs []string
	for _, pod := range pods {
		seen[pod.Name] = true
		if pod.DeletionTimestamp != nil {
			continue
		}
		if pod.Labels[LabelProject] == "" || podGeneration(pod) == 0 {
			continue
		}
		candidates = append(candidates, pod)
		projectIDs = append(projectIDs, pod.Labels[LabelProject])
	}
	var assignments map[string]store.RuntimeAssignment
	var readErr error
	if len(projectIDs) > 0 {
		assignments, readErr = d.o.Store.GetRuntimeAssignments(ctx, projectIDs)
	}
	// assignment is the per-pod read of before, from the pass's one read:
	// a project with no row is ErrNotFound; a failed read fails every pod.
	assignment := func(projectID string) (store.RuntimeAssignment, error) {
		if readErr != nil {
			return store.RuntimeAssignment{}, readErr
		}
		if a, ok := assignments[projectID]; ok {
			return a, nil
		}
		return store.RuntimeAssignment{}, store.ErrNotFound
	}
	warned := false
	for _, pod := range candidates {
		projectID, gen := pod.Labels[LabelProject], podGeneration(pod)
		a, err := assignment(projectID)
		switch {
		case errors.Is(err, store.ErrNotFound) || (err == nil && (a.Driver != Name || a.Generation > gen)):
			d.log.Info("stopping a replaced runtime pod", zap.String("projectId", projectID), zap.String("pod", pod.Name))
			d.deletePod(ctx, pod.Name, pod.UID)
		case a.Generation == gen && a.Instance != "" && a.Instance != pod.Name:
			// Labelled for the generation but not the pod its assignment
			// names: a spare whose claim lost the race (or whose
			// claiming replica died before naming it). It holds nothing.
			d.log.Info("stopping a runtime pod its assignment does not name", zap.String("projectId", projectID),
				zap.String("pod", pod.Name), zap.String("named", a.Instance))
			d.deletePod(ctx, pod.Name, pod.UID)
		case err != nil:
			if !warned { // one failed read for the whole pass
				warned = true
				d.log.Warn("reading the runtime assignments failed", zap.Int("pods", len(candidates)), zap.Error(err))
			}
		case d.busy(pod.Name):
			d.touch(pod) // in use: the other replicas' reapers see it too
		case d.o.IdleTimeout > 0 && now.Sub(d.lastUse(pod)) > d.o.IdleTimeout:
			if _, err := d.o.Store.AdvanceRuntime(ctx, projectID, Name, gen); err != nil {
				d.log.Warn("advancing the runtime generation failed", zap.String("projectId", projectID), zap.Error(err))
				continue
			}
			d.log.Info("stopping an idle runtime pod", zap.String("projectId", projectID), zap.String("pod", pod.Name),
				zap.Duration("idle", now.Sub(d.lastUse(pod))))
			d.deletePod(ctx, pod.Name, pod.UID)
		}
	}
	d.mu.Lock()
	for name := range d.lastUsed {
		if !seen[name] {
			delete(d.lastUsed, name)
			delete(d.marked, name)
		}
	}
	d.mu.Unlock()
}
