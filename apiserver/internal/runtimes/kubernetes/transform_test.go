package kubernetes

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The informer keeps what the driver reads of a pod and nothing else: the
// managed fields and the template's bulk are gone, the sidecar's port, the
// driver's labels and annotations, and the status stay.
func TestLeanPod(t *testing.T) {
	t.Parallel()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "svc-rt-p-g1", Namespace: "rt", UID: "u1",
			Labels:        map[string]string{LabelManagedBy: ManagedBy, LabelProject: "p"},
			Annotations:   map[string]string{AnnotationGeneration: "1", AnnotationSyncMode: "s3", AnnotationLastUsed: "t", "kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 2000)},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: FieldManager, FieldsV1: metav1.NewFieldsV1(`{"f:spec":{}}`)}}},
		Spec: corev1.PodSpec{NodeName: "n1",
			InitContainers: []corev1.Container{{Name: PodagentContainer, Image: "podagent", Ports: []corev1.ContainerPort{{ContainerPort: 8081}},
				Env: []corev1.EnvVar{{Name: "SVC_PROJECT_ID", Value: "p"}}}},
			Containers: []corev1.Container{{Name: "agent", Image: "runtime", Args: []string{"run"}}},
			Volumes:    []corev1.Volume{{Name: "workspace"}}},
		Status: corev1.PodStatus{PodIP: "10.0.0.7", Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	before, _ := json.Marshal(pod)
	out, err := leanPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	lean := out.(*corev1.Pod)
	after, _ := json.Marshal(lean)
	if len(lean.ManagedFields) != 0 || len(lean.Spec.Volumes) != 0 || lean.Spec.InitContainers[0].Env != nil {
		t.Errorf("the lean pod keeps what nobody reads: %s", after)
	}
	if _, ok := lean.Annotations["kubectl.kubernetes.io/last-applied-configuration"]; ok {
		t.Error("a foreign annotation was kept")
	}
	if podGeneration(lean) != 1 || lean.Annotations[AnnotationLastUsed] != "t" || lean.Labels[LabelProject] != "p" {
		t.Errorf("the driver's labels and annotations were lost: %v %v", lean.Labels, lean.Annotations)
	}
	c, err := sidecar(lean)
	if err != nil || c.Ports[0].ContainerPort != 8081 || !podReady(lean) || lean.Spec.NodeName != "n1" {
		t.Errorf("sidecar %v (%v), ready %v", c, err, podReady(lean))
	}
	if len(after) >= len(before)/2 {
		t.Errorf("lean pod %d bytes, the pod %d", len(after), len(before))
	}
	if other, _ := leanPod("not a pod"); other != "not a pod" {
		t.Error("a non-pod object was changed")
	}
}
