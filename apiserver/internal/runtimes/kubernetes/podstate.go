package kubernetes

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// Labels and annotations the driver puts on its pods and Secrets.
const (
	LabelManagedBy       = "app.kubernetes.io/managed-by"
	ManagedBy            = "svc-apiserver"
	LabelProject         = "svc.dev/project-id"
	LabelWorkspace       = "svc.dev/workspace-id"
	AnnotationSyncMode   = "svc.dev/cloud-sync-mode"
	AnnotationGeneration = "svc.dev/runtime-generation"
	AnnotationLastUsed   = "svc.dev/last-used"
)

// waitingFailures are container waiting reasons that will not fix
// themselves within a cold start: the start fails at once with the reason.
var waitingFailures = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true, "ErrImageNeverPull": true,
	"CrashLoopBackOff": true, "CreateContainerConfigError": true, "CreateContainerError": true,
	"RunContainerError": true,
}

// podFailure explains why pod can no longer become Ready, or "" while it
// still may.
func podFailure(pod *corev1.Pod) string {
	if pod.DeletionTimestamp != nil {
		return "the pod is being deleted"
	}
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		msg := fmt.Sprintf("the pod ended (phase %s)", pod.Status.Phase)
		if pod.Status.Reason != "" {
			msg += ": " + pod.Status.Reason + " " + pod.Status.Message
		}
		return msg
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return "unschedulable: " + c.Message
		}
	}
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range list {
			if w := cs.State.Waiting; w != nil && waitingFailures[w.Reason] {
				return fmt.Sprintf("container %s: %s: %s", cs.Name, w.Reason, w.Message)
			}
		}
	}
	return ""
}

// podReady reports whether Kubernetes considers pod Ready and it has an IP.
func podReady(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.PodIP == "" {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podPending describes a pod that is not Ready yet, for the timeout error.
func podPending(pod *corev1.Pod) string {
	if pod == nil {
		return "the pod does not exist"
	}
	msg := "phase " + string(pod.Status.Phase)
	for _, c := range pod.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Reason != "" {
			msg += fmt.Sprintf(", %s=%s (%s)", c.Type, c.Status, c.Reason)
		}
	}
	if pod.Status.PodIP == "" {
		msg += ", no pod IP"
	}
	return msg
}

func podGeneration(pod *corev1.Pod) int64 {
	g, _ := strconv.ParseInt(pod.Annotations[AnnotationGeneration], 10, 64)
	return g
}
