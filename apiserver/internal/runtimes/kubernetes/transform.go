package kubernetes

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// leanPod is the informer's transform (docs/scale.md): a cached runtime pod
// keeps what the driver reads — name, labels, the driver's annotations,
// deletion, owner, the sidecar's ports and the status it routes on — and
// drops the managed fields (a third of a pod's JSON) and everything else
// nobody reads, before it is stored. Objects other than pods pass unchanged.
func leanPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	pod.ManagedFields = nil
	ann := map[string]string{}
	for k, v := range pod.Annotations {
		if strings.HasPrefix(k, annotationPrefix) {
			ann[k] = v
		}
	}
	pod.Annotations = ann
	// Of the spec, the driver reads the containers' names and ports (the
	// sidecar's address); the rest (volumes, env, probes, resources) is
	// the template's and stays in the API server.
	keep := func(cs []corev1.Container) []corev1.Container {
		out := make([]corev1.Container, len(cs))
		for i, c := range cs {
			out[i] = corev1.Container{Name: c.Name, Ports: c.Ports}
		}
		return out
	}
	pod.Spec = corev1.PodSpec{NodeName: pod.Spec.NodeName, InitContainers: keep(pod.Spec.InitContainers),
		Containers: keep(pod.Spec.Containers)}
	return pod, nil
}

// annotationPrefix is the driver's annotations' (sync mode, generation,
// last use): the only ones the driver reads.
const annotationPrefix = "svc.dev/"

var _ cache.TransformFunc = leanPod
