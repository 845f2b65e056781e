package kubetest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPickPorts: six distinct ports, in the range, free when picked.
func TestPickPorts(t *testing.T) {
	t.Parallel()
	p, err := pickPorts()
	if err != nil {
		t.Fatal(err)
	}
	all := []int{p.EtcdPeer, p.Etcd, p.KubeApiserver, p.KwokController, p.KubeControllerManager, p.KubeScheduler}
	seen := map[int]bool{}
	for _, port := range all {
		if port < portLow || port >= portHigh || seen[port] {
			t.Errorf("ports %v: %d out of %d–%d or repeated", all, port, portLow, portHigh)
		}
		seen[port] = true
	}
	if !strings.Contains(p.options(), fmt.Sprintf("kubeSchedulerPort: %d\n", p.KubeScheduler)) {
		t.Errorf("options %q lack the scheduler's port", p.options())
	}
}

// TestConcurrentStarts: two control planes created at the same moment (as
// two test binaries do) both come up on ports of their own, and each one's
// scheduler places a pod on its own fake node: no component talks to the
// other cluster's kube-apiserver.
func TestConcurrentStarts(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), startAttempts*attemptTimeout)
	defer cancel()
	var clusters [2]*Cluster
	var errs [2]error
	var wg sync.WaitGroup
	for i := range clusters {
		wg.Go(func() { clusters[i], errs[i] = Start(ctx) })
	}
	wg.Wait()
	for i, c := range clusters {
		if c != nil {
			t.Cleanup(c.Delete)
		}
		if errs[i] != nil {
			t.Fatalf("cluster %d: %v", i, errs[i])
		}
	}
	if clusters[0].Config.Host == clusters[1].Config.Host {
		t.Fatalf("both clusters' kube-apiserver at %s", clusters[0].Config.Host)
	}
	for i, c := range clusters {
		ns := c.Namespace(t, "ports")
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "none"}}}}
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("cluster %d: %v", i, err)
		}
		for deadline := time.Now().Add(60 * time.Second); ; {
			p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "p", metav1.GetOptions{})
			if err == nil && p.Spec.NodeName == NodeName {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cluster %d: the pod is not scheduled to %s after 60 s: %v %s\n%s", i, NodeName, err, podSummary(p), c.ComponentLogs())
			}
			time.Sleep(100 * time.Millisecond) // poll with a deadline
		}
	}
}
