package kubernetes

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodFailureAndReadiness(t *testing.T) {
	t.Parallel()
	now := metav1.NewTime(time.Now())
	waiting := func(reason string) corev1.PodStatus {
		return corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{{Name: "podagent",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "m"}}}}}
	}
	ready := corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.1.0.3",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	cases := []struct {
		name    string
		pod     corev1.Pod
		failure string // substring; "" = may still become Ready
		ready   bool
	}{
		{"pending", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}, "", false},
		{"ready", corev1.Pod{Status: ready}, "", true},
		{"ready without IP", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}, "", false},
		{"image pull", corev1.Pod{Status: waiting("ErrImagePull")}, "ErrImagePull", false},
		{"image pull backoff", corev1.Pod{Status: waiting("ImagePullBackOff")}, "ImagePullBackOff", false},
		{"crash loop", corev1.Pod{Status: waiting("CrashLoopBackOff")}, "CrashLoopBackOff", false},
		{"container creating", corev1.Pod{Status: waiting("ContainerCreating")}, "", false},
		{"unschedulable", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			Message: "0/1 nodes are available"}}}}, "unschedulable: 0/1 nodes", false},
		{"failed", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"}}, "Evicted", false},
		{"deleting", corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}, Status: ready}, "being deleted", false},
	}
	for _, c := range cases {
		got := podFailure(&c.pod)
		if (c.failure == "") != (got == "") || !strings.Contains(got, c.failure) {
			t.Errorf("%s: podFailure = %q, want %q", c.name, got, c.failure)
		}
		if r := podReady(&c.pod); r != c.ready {
			t.Errorf("%s: podReady = %v, want %v", c.name, r, c.ready)
		}
	}
}

func TestPodTemplate(t *testing.T) {
	t.Parallel()
	const good = `apiVersion: v1
kind: Pod
metadata:
  name: "[[ .PodName ]]"
  labels: {svc.dev/project-id: "[[ .ProjectID ]]"}
spec:
  initContainers:
    - name: podagent
      image: podagent:1
      restartPolicy: Always
      ports: [{name: podagent, containerPort: 8081}]
      env:
        - {name: SVC_CLOUD_SYNC_MODE, value: "[[ .SyncMode ]]"}
  containers:
    - {name: agent, image: agent:1}
`
	cases := []struct {
		name, text, err string
	}{
		{"good", good, ""},
		{"unknown field", strings.Replace(good, "restartPolicy: Always", "restartPolicyy: Always", 1), "unknown field"},
		{"unknown template field", strings.Replace(good, ".SyncMode", ".Mode", 1), "Mode"},
		{"no sidecar", strings.Replace(good, "name: podagent\n", "name: other\n", 1), `no container named "podagent"`},
		{"no port", strings.Replace(good, "      ports: [{name: podagent, containerPort: 8081}]\n", "", 1), "declares no port"},
		{"not a pod", strings.Replace(good, "kind: Pod", "kind: Deployment", 1), "want v1/Pod"},
	}
	for _, c := range cases {
		pt, err := ParsePodTemplate(c.text)
		if c.err == "" {
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			pod, err := pt.Render(TemplateData{PodName: PodName("prj_ab2", 3), ProjectID: "prj_ab2", SyncMode: "s3"})
			if err != nil || pod.Name != "svc-rt-prj-ab2-g3" || pod.Spec.InitContainers[0].Env[0].Value != "s3" {
				t.Errorf("%s: rendered %v %v", c.name, pod, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.err)
		}
	}
}
