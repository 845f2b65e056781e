package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/runtimetoken"
	"github.com/svc-dev/svc/shared/syncmode"
	"github.com/svc-dev/svc/shared/wire"
)

// The warm pool (docs/scale.md, "A warm pool"): PoolSize spare runtime pods
// per namespace, rendered from the same template as a project's pod but
// holding no project and no project secret. A spare's podagent starts
// unassigned (SVC_POD_UNASSIGNED) with only its bootstrap token
// (runtimetoken.Bootstrap of its own name), in its Secret where a project's
// pod has its runtime token. A project's cold start claims a spare instead
// of creating a pod: it relabels the spare as the project's pod of the
// generation (a merge patch conditional on the spare's resourceVersion, so
// two claims never take one spare), names it in the assignment
// (ReserveRuntimeInstance, so two replicas never start two pods for one
// generation), and hands it the project, sync mode, generation and runtime
// token over the claim call. From there the pod is the project's like any
// other: it claims the ownership record with its generation and
// cold-starts; fencing, the idle reaper, restarts and mode changes see its
// labels and annotations only. An empty pool falls back to creating a pod.
//
// Spare names are deterministic, svc-rt-spare-<slot>-<seq>: slot 0..size-1,
// seq one past the highest seq of the slot any pod (spare or claimed) still
// carries. Replicas that see the same pods apply the same names (server-side
// apply: one pod), so they never create more spares than asked; a replica
// that sees a slot's spare claimed has seen the claim before any later
// deletion (a watch delivers in order).

// Labels and annotations of the pool.
const (
	// LabelSpare marks an unclaimed spare (its value: the slot); a claim
	// removes it.
	LabelSpare = "svc.dev/spare"
	// AnnotationSpare is the spare's "<slot>-<seq>"; it stays on a claimed
	// pod, so the slot's next spare gets the next seq.
	AnnotationSpare = "svc.dev/spare-of-pool"
	// AnnotationClaimedAt is when a spare was claimed.
	AnnotationClaimedAt = "svc.dev/claimed-at"
)

// SpareName is the name of the spare pod of slot, seq (and of its Secret).
func SpareName(slot, seq int) string { return fmt.Sprintf("svc-rt-spare-%d-%d", slot, seq) }

func spareSlot(pod *corev1.Pod) (slot, seq int, ok bool) {
	a, b, found := strings.Cut(pod.Annotations[AnnotationSpare], "-")
	if !found {
		return 0, 0, false
	}
	slot, err1 := strconv.Atoi(a)
	seq, err2 := strconv.Atoi(b)
	return slot, seq, err1 == nil && err2 == nil
}

func isSpare(pod *corev1.Pod) bool {
	_, ok := pod.Labels[LabelSpare]
	return ok && pod.Labels[LabelProject] == ""
}

// poolLoop keeps the pool full and probes new spares, on every pod event
// (at most every quarter second) and every second.
func (d *Driver) poolLoop(ctx context.Context) {
	for {
		changed := d.changedCh()
		d.refill(ctx)
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-changed:
		case <-t.C:
		}
		t.Stop()
		select {
		case <-ctx.Done():
			return
		case <-time.After(250 * time.Millisecond): // coalesce bursts of pod events
		}
	}
}

// refill applies the missing spares, deletes spares beyond the pool's size
// and ended ones, and probes the spares not yet known to serve.
func (d *Driver) refill(ctx context.Context) {
	pods, _ := d.pods.Pods(d.o.Namespace).List(labels.Everything())
	top := map[int]int{}          // slot → highest seq any pod carries
	have := map[int]*corev1.Pod{} // slot → its unclaimed spare (the highest seq)
	alive := map[string]bool{}
	for _, pod := range pods {
		slot, seq, ok := spareSlot(pod)
		if !ok {
			continue
		}
		top[slot] = max(top[slot], seq)
		if !isSpare(pod) || pod.DeletionTimestamp != nil {
			continue
		}
		if slot >= d.o.PoolSize || podFailure(pod) != "" {
			d.log.Info("removing a spare runtime pod", zap.String("pod", pod.Name), zap.String("why", podFailure(pod)))
			d.deletePod(ctx, pod.Name, pod.UID)
			continue
		}
		if prev := have[slot]; prev != nil {
			// Two spares in one slot (replicas that saw the slot's last
			// pod go at different times): the higher seq stays, on every
			// replica; the other goes unless it was claimed meanwhile.
			drop := prev
			if _, prevSeq, _ := spareSlot(prev); prevSeq > seq {
				drop = pod
			}
			d.deleteUnchanged(ctx, drop)
			if drop == pod {
				continue
			}
			delete(alive, prev.Name)
		}
		have[slot] = pod
		alive[pod.Name] = true
		if podReady(pod) && !d.isWarm(pod.Name) {
			if _, u, err := d.endpoint("", pod); err == nil {
				pc := internalapi.PodClient{BaseURL: u, HTTP: d.client, Timeout: time.Second}
				if pc.Ready(ctx) == nil {
					d.mu.Lock()
					d.warm[pod.Name] = true
					d.mu.Unlock()
				}
			}
		}
	}
	d.mu.Lock()
	for name := range d.warm {
		if !alive[name] {
			delete(d.warm, name)
		}
	}
	d.mu.Unlock()
	for slot := 0; slot < d.o.PoolSize; slot++ {
		if have[slot] != nil {
			continue
		}
		// Spares take the creation gate's spare turns only: a rush of
		// first messages goes first.
		if d.gate.wait(ctx, 0) != nil {
			return
		}
		if err := d.applySpare(ctx, SpareName(slot, top[slot]+1), slot, top[slot]+1); err != nil {
			d.log.Warn("applying a spare runtime pod failed", zap.Int("slot", slot), zap.Error(err))
		}
	}
}

// deleteUnchanged deletes pod unless it changed since this replica saw it
// (a spare claimed meanwhile is the project's now).
func (d *Driver) deleteUnchanged(ctx context.Context, pod *corev1.Pod) {
	uid, rv := pod.UID, pod.ResourceVersion
	err := d.o.Client.CoreV1().Pods(d.o.Namespace).Delete(ctx, pod.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		d.log.Warn("deleting a spare runtime pod failed", zap.String("pod", pod.Name), zap.Error(err))
	}
}

func (d *Driver) isWarm(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.warm[name]
}

// warmCount is how many spares answered /readyz unassigned and are not
// claimed (svc_runtime_warm_pool_size).
func (d *Driver) warmCount() int {
	n := 0
	for _, pod := range d.spares() {
		if d.isWarm(pod.Name) {
			n++
		}
	}
	return n
}

// spares are the unclaimed, Ready spares in this replica's informer.
func (d *Driver) spares() []*corev1.Pod {
	pods, _ := d.pods.Pods(d.o.Namespace).List(labels.Everything())
	var out []*corev1.Pod
	for _, pod := range pods {
		if isSpare(pod) && podReady(pod) && podFailure(pod) == "" {
			out = append(out, pod)
		}
	}
	return out
}

// applySpare renders and applies one spare pod and its bootstrap Secret.
func (d *Driver) applySpare(ctx context.Context, name string, slot, seq int) error {
	pod, err := d.o.Template.Render(TemplateData{PodName: name, Namespace: d.o.Namespace,
		SyncMode: string(syncmode.Default), TokenSecretName: name})
	if err != nil {
		return err
	}
	pod.Name, pod.Namespace = name, d.o.Namespace
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Labels[LabelManagedBy] = ManagedBy
	delete(pod.Labels, LabelProject)
	delete(pod.Annotations, AnnotationSyncMode)
	pod.Labels[LabelSpare] = strconv.Itoa(slot)
	pod.Annotations[AnnotationSpare] = fmt.Sprintf("%d-%d", slot, seq)
	c, err := sidecar(pod)
	if err != nil {
		return err
	}
	setEnv(c, "SVC_PROJECT_ID", "")
	setEnv(c, "SVC_POD_UNASSIGNED", "true")
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
		return err
	}
	force := true
	out, err := d.o.Client.CoreV1().Pods(d.o.Namespace).Patch(ctx, name, types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: FieldManager, Force: &force})
	if err != nil {
		if apierrors.IsInvalid(err) || apierrors.IsConflict(err) || apierrors.IsForbidden(err) {
			return nil // it exists (claimed meanwhile, relabelled): the next pass sees it
		}
		return err
	}
	return d.applyTokenSecret(ctx, out, "", runtimetoken.Bootstrap(d.o.RuntimeSecret, name))
}

// errNoSpare: no spare could be claimed; the cold start creates a pod.
var errNoSpare = errors.New("no spare runtime pod")

// errNamedElsewhere: another replica named the generation's pod first.
var errNamedElsewhere = errors.New("another replica named the generation's pod")

// claimSpare takes a warm spare for generation gen of the project: the
// spare relabelled as the project's pod, named in the assignment. It
// returns the pod the assignment names for gen — the spare, or the pod
// another replica named first (then the spare is released) — or
// errNoSpare.
func (d *Driver) claimSpare(ctx context.Context, p store.Project, mode syncmode.Mode, gen int64) (*corev1.Pod, string, error) {
	spares := d.spares()
	rand.Shuffle(len(spares), func(i, j int) { spares[i], spares[j] = spares[j], spares[i] })
	for _, sp := range spares {
		if !d.isWarm(sp.Name) {
			continue
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": sp.ResourceVersion,
			"labels":          map[string]any{LabelSpare: nil, LabelProject: p.ID, LabelWorkspace: p.WorkspaceID},
			"annotations": map[string]string{AnnotationGeneration: strconv.FormatInt(gen, 10),
				AnnotationSyncMode: string(mode), AnnotationClaimedAt: time.Now().UTC().Format(time.RFC3339Nano)}}})
		pod, err := d.o.Client.CoreV1().Pods(d.o.Namespace).Patch(ctx, sp.Name, types.MergePatchType, patch,
			metav1.PatchOptions{FieldManager: FieldManager})
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			continue // claimed by another start, or gone
		}
		if err != nil {
			return nil, "", err
		}
		d.mu.Lock()
		delete(d.warm, sp.Name)
		d.mu.Unlock()
		a, err := d.o.Store.ReserveRuntimeInstance(ctx, p.ID, Name, gen, pod.Name)
		if err != nil || a.Instance != pod.Name {
			// Another replica named the generation's pod first, or the
			// generation moved on: this spare was handed nothing; it
			// goes back to the pool.
			d.release(pod)
			if errors.Is(err, store.ErrStaleGeneration) {
				return nil, "", errReplaced
			}
			if err != nil {
				return nil, "", err
			}
			return nil, a.Instance, errNamedElsewhere
		}
		return pod, pod.Name, nil
	}
	return nil, "", errNoSpare
}

// release gives back a spare relabelled for a claim that lost its race
// (the claim call was never made): the labels and annotations of the claim
// are removed, conditionally on nothing else having changed the pod; a pod
// that cannot be given back is deleted.
func (d *Driver) release(pod *corev1.Pod) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	slot, _, _ := spareSlot(pod)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": pod.ResourceVersion,
		"labels":          map[string]any{LabelSpare: strconv.Itoa(slot), LabelProject: nil, LabelWorkspace: nil},
		"annotations":     map[string]any{AnnotationGeneration: nil, AnnotationSyncMode: nil, AnnotationClaimedAt: nil}}})
	if _, err := d.o.Client.CoreV1().Pods(d.o.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
		d.log.Info("a spare that lost its claim could not be given back; deleting it", zap.String("pod", pod.Name), zap.Error(err))
		d.deletePod(ctx, pod.Name, pod.UID)
	}
}

// handOver is the claim call: the pod gets its project, mode, generation
// and runtime token, authenticated by its bootstrap token. A pod not
// serving yet (its Ready seen before its listener) is asked again, within
// ctx.
func (d *Driver) handOver(ctx context.Context, p store.Project, mode syncmode.Mode, gen int64, pod *corev1.Pod) error {
	_, u, err := d.endpoint(p.ID, pod)
	if err != nil {
		return err
	}
	pc := internalapi.PodClient{BaseURL: u, HTTP: d.client, Token: runtimetoken.Bootstrap(d.o.RuntimeSecret, pod.Name)}
	claim := wire.PodClaim{ProjectID: p.ID, SyncMode: string(mode), Generation: gen,
		RuntimeToken: runtimetoken.Mint(d.o.RuntimeSecret, p.ID)}
	wait := 20 * time.Millisecond
	for {
		if cur, _ := d.pods.Pods(d.o.Namespace).Get(pod.Name); cur == nil || cur.UID != pod.UID {
			return errors.New("the claimed pod vanished")
		} else if why := podFailure(cur); why != "" {
			return errors.New(why)
		}
		_, err := pc.Claim(ctx, claim)
		if err == nil {
			return nil
		}
		if _, answered := internalapi.AsStatus(err); answered {
			return err // refused: a retry would be refused too
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the claim call: %w", err)
		case <-time.After(wait): // the pod's listener is not up yet
		}
		wait = min(wait*2, 500*time.Millisecond)
	}
}
