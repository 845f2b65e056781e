package e2e

// The chart on a real control plane (kwokctl --runtime binary):
// `helm install` into a fresh namespace, server-side validation of every
// rendering (`helm template | kubectl apply --dry-run=server`), the API
// server Deployment Available with the real apiserver binary running in each
// of its pods (the fake kubelet runs the pod's `migrate` init container, then
// `serve`, with the pod's own env, Secret and ConfigMap volumes, on the pod
// IP), `helm upgrade`, `helm uninstall`, and a values.schema.json violation
// refused.

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/testenv/kubetest"
)

const chartDir = "../../charts/svc"

// helm runs the pinned helm against the cluster with a private home (no
// repositories or plugins of the machine) and returns its combined output.
func helm(t testing.TB, c *kubetest.Cluster, args ...string) (string, error) {
	t.Helper()
	bin := os.Getenv("SVC_HELM_BIN")
	if bin == "" {
		t.Fatal("SVC_HELM_BIN is not set: run the tests through `make test` (it builds the pinned helm with `make tools`)")
	}
	dir := t.TempDir()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig,
		"HELM_CACHE_HOME="+filepath.Join(dir, "cache"), "HELM_CONFIG_HOME="+filepath.Join(dir, "config"),
		"HELM_DATA_HOME="+filepath.Join(dir, "data"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// monitoringCRDs are stand-ins for the prometheus-operator CRDs (the
// chart's ServiceMonitor and PodMonitor need their kinds to exist); their
// schema accepts any spec.
func monitoringCRDs() string {
	var docs []string
	for _, kind := range []string{"ServiceMonitor", "PodMonitor"} {
		lower := strings.ToLower(kind)
		docs = append(docs, fmt.Sprintf(crdStandIn, lower+"s", kind, lower))
	}
	return strings.Join(docs, "---\n")
}

// crdStandIn is a CRD of the monitoring.coreos.com group: %[1]s the plural,
// %[2]s the kind, %[3]s the singular.
const crdStandIn = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: %[1]s.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {kind: %[2]s, plural: %[1]s, singular: %[3]s, listKind: %[2]sList}
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`

// Every values file of the chart's golden tests renders manifests the API
// server accepts (`helm install --dry-run=server` would not validate them);
// and the dry run does validate: a port out of range, past the schema, is
// refused by the server.
func TestKubernetesChartServerSideValidation(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	ctx := context.Background()
	if out, err := c.Kubectl(ctx, monitoringCRDs(), "apply", "--server-side", "-f", "-"); err != nil {
		t.Fatalf("monitoring CRDs: %v\n%s", err, out)
	}
	if out, err := c.Kubectl(ctx, "", "wait", "--for", "condition=established", "--timeout", "60s",
		"crd/servicemonitors.monitoring.coreos.com", "crd/podmonitors.monitoring.coreos.com"); err != nil {
		t.Fatalf("monitoring CRDs not established: %v\n%s", err, out)
	}
	files, err := filepath.Glob("../../charts/tests/testdata/*.yaml")
	must(t, err)
	if len(files) == 0 {
		t.Fatal("no values files in charts/tests/testdata")
	}
	type tc struct {
		name string
		args []string
		want string // "" → accepted; else a part of the refusal
	}
	var cases []tc
	for _, f := range files {
		cases = append(cases, tc{name: filepath.Base(f), args: []string{"--values", f}})
	}
	cases = append(cases, tc{name: "port out of range (schema skipped)",
		args: []string{"--skip-schema-validation", "--set", "apiserver.port=70000"}, want: "must be between 1 and 65535"})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := c.Namespace(t, "svc-dry")
			args := append([]string{"template", "svc", chartDir, "--namespace", ns, "--kube-version", kubetest.K8sVersion}, tc.args...)
			if valuesRuntimeNamespace(t, tc.args) != "" {
				// runtime pods in a namespace of their own: one of the test's.
				args = append(args, "--set", "runtime.namespace="+c.Namespace(t, "svc-dry-rt"))
			}
			out, err := helm(t, c, args...)
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, out)
			}
			res, err := c.Kubectl(ctx, out, "apply", "--dry-run=server", "-f", "-")
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("the API server refused the chart's manifests: %v\n%s", err, res)
			case tc.want == "" && !strings.Contains(res, "deployment.apps/svc created (server dry run)"):
				t.Errorf("no server dry run of the Deployment:\n%s", res)
			case tc.want != "" && (err == nil || !strings.Contains(res, tc.want)):
				t.Errorf("want a refusal with %q, got %v:\n%s", tc.want, err, res)
			}
		})
	}
}

// valuesRuntimeNamespace is runtime.namespace of a --values file in args.
func valuesRuntimeNamespace(t *testing.T, args []string) string {
	t.Helper()
	for i, a := range args {
		if a != "--values" || i+1 == len(args) {
			continue
		}
		b, err := os.ReadFile(args[i+1])
		must(t, err)
		var v struct {
			Runtime struct{ Namespace string } `yaml:"runtime"`
		}
		must(t, yaml.Unmarshal(b, &v))
		return v.Runtime.Namespace
	}
	return ""
}

// The chart's whole life on the cluster: a schema violation refused, then
// install (Deployment Available, each replica's real apiserver ready and
// serving the chart's catalog), upgrade (a changed value observed), and
// uninstall (every object gone, the apiserver processes stopped).
func TestKubernetesChartLifecycle(t *testing.T) {
	t.Parallel()
	c := kubetest.Shared(t)
	e := newEnv(t)
	s3 := testenv.MinIO(t)
	ns := c.Namespace(t, "svc-chart")
	ctx := context.Background()
	_, err := c.Client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "svc-secrets"},
		StringData: map[string]string{"database-url": e.dbURL, "s3-access-key": s3.AccessKey,
			"s3-secret-key": s3.SecretKey, "runtime-auth-secret": "chart-e2e-runtime-secret"},
	}, metav1.CreateOptions{})
	must(t, err)
	// The release "svc" names everything "svc"; its API server pods drive the
	// cluster as the chart's ServiceAccount (no in-cluster config here).
	kubelet := &kubetest.Kubelet{Cluster: c, Namespace: ns, Selector: "app.kubernetes.io/component=apiserver",
		Container: "apiserver", Init: []string{"migrate"}, Binary: apiserverBin,
		ExtraEnv: []string{"SVC_KUBECONFIG=" + c.ImpersonatingKubeconfig(t, "system:serviceaccount:"+ns+":svc")}}
	kubelet.Run(t)
	// No warm pool: its spares are the driver's pods, not the release's,
	// and outlive an uninstall as project pods do (docs/scale.md); this
	// test counts the release's objects only.
	install := []string{"--namespace", ns, "--set", "s3.endpoint=" + s3.Endpoint, "--set", "s3.bucket=" + s3.Bucket,
		"--set", "runtime.warmPool.size=0"}

	// 0. A schema violation is refused with the offending value named, and
	// nothing is installed.
	out, err := helm(t, c, append([]string{"install", "svc", chartDir, "--set", "runtime.terminationGracePeriodSeconds=15"}, install...)...)
	for _, want := range []string{"values don't meet the specifications of the schema", "/runtime/terminationGracePeriodSeconds", "minimum"} {
		if err == nil || !strings.Contains(out, want) {
			t.Errorf("install with a grace period of 15 s: want a refusal naming %q, got %v:\n%s", want, err, out)
		}
	}
	if l, _ := helm(t, c, "list", "--namespace", ns, "--all", "--short"); strings.TrimSpace(l) != "" {
		t.Errorf("the refused install left a release: %q", l)
	}

	// 1. Install: the Deployment becomes Available, and each of its pods
	// runs the real apiserver (migrate, then serve) from the pod's own spec.
	began := time.Now()
	if out, err := helm(t, c, append([]string{"install", "svc", chartDir}, install...)...); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	dep := waitAvailable(t, c, ns, 2)
	t.Logf("helm install → Deployment Available (2 replicas): %s", time.Since(began).Round(time.Millisecond))
	acc := e.account("free")
	pods := servingPods(t, c, kubelet, ns, dep, acc.key)
	for _, p := range pods {
		if !slices.Contains(kubelet.Events(), "init "+p.Name+" migrate") {
			t.Errorf("the migrate init container did not run before serve in %s: %v", p.Name, kubelet.Events())
		}
	}
	if _, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "svc", metav1.GetOptions{}); err != nil {
		t.Errorf("no PodDisruptionBudget with 2 replicas: %v", err)
	}

	// 2. Upgrade: one replica and another idle timeout. The Deployment rolls
	// out new pods carrying the new value (their apiserver started with it),
	// the old pods' processes stop, and the PDB (only for >1 replica) goes.
	if out, err := helm(t, c, append([]string{"upgrade", "svc", chartDir, "--set", "apiserver.replicaCount=1",
		"--set", "runtime.idleTimeout=5m"}, install...)...); err != nil {
		t.Fatalf("helm upgrade: %v\n%s", err, out)
	}
	dep = waitAvailable(t, c, ns, 1)
	upgraded := servingPods(t, c, kubelet, ns, dep, acc.key)
	if p := kubelet.Process(upgraded[0].Name); !slices.Contains(p.Env, "SVC_RUNTIME_IDLE_TIMEOUT=5m") {
		t.Errorf("the upgraded pod's apiserver runs without SVC_RUNTIME_IDLE_TIMEOUT=5m: %v", p.Env)
	}
	for _, p := range pods {
		waitKubeletEvent(t, kubelet, "exit "+p.Name)
	}
	if _, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "svc", metav1.GetOptions{}); err == nil {
		t.Error("the PodDisruptionBudget survived the upgrade to one replica")
	}
	if out, err := helm(t, c, "history", "svc", "--namespace", ns); err != nil || !strings.Contains(out, "Upgrade complete") {
		t.Errorf("helm history after the upgrade: %v\n%s", err, out)
	}

	// 3. Uninstall: every object of the release is gone, the pods too (and
	// with them the apiserver processes).
	if out, err := helm(t, c, "uninstall", "svc", "--namespace", ns, "--wait", "--timeout", "90s"); err != nil {
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
	// The Deployment's ReplicaSets and pods go through the garbage
	// collector after helm deleted the Deployment: wait (bounded).
	waitKubeletEvent(t, kubelet, "exit "+upgraded[0].Name)
	deadline := time.Now().Add(90 * time.Second)
	for {
		left, err := c.Kubectl(ctx, "", "get", "deployments,replicasets,pods,services,configmaps,serviceaccounts,roles,rolebindings,poddisruptionbudgets",
			"--namespace", ns, "-l", "app.kubernetes.io/instance=svc", "-o", "name")
		left = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(left), "No resources found in "+ns+" namespace."))
		if err == nil && left == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("objects of the release left 90 s after helm uninstall: %v\n%s", err, left)
		}
		time.Sleep(200 * time.Millisecond) // poll with a deadline
	}
}

// waitAvailable waits (bounded) until the release's Deployment has rolled
// out replicas pods, all updated and available, and the old ones gone.
func waitAvailable(t *testing.T, c *kubetest.Cluster, ns string, replicas int32) *appsv1.Deployment {
	t.Helper()
	deadline := time.Now().Add(120 * time.Second)
	for {
		d, err := c.Client.AppsV1().Deployments(ns).Get(context.Background(), "svc", metav1.GetOptions{})
		if err == nil && d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == replicas &&
			d.Status.AvailableReplicas == replicas && d.Status.Replicas == replicas && deploymentAvailable(d) {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("Deployment svc not Available with %d replicas after 120 s: %v %+v", replicas, err, d.Status)
		}
		time.Sleep(100 * time.Millisecond) // poll with a deadline
	}
}

func deploymentAvailable(d *appsv1.Deployment) bool {
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// servingPods returns the Deployment's current pods once the apiserver the
// fake kubelet runs in each answers the chart's readiness probe (/readyz at
// the pod IP and container port) and serves the chart's catalog (the
// ConfigMap-mounted models file) to an API key.
func servingPods(t *testing.T, c *kubetest.Cluster, k *kubetest.Kubelet, ns string, d *appsv1.Deployment, key string) []corev1.Pod {
	t.Helper()
	l, err := c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{
		LabelSelector: metav1.FormatLabelSelector(d.Spec.Selector)})
	must(t, err)
	hash := currentTemplateHash(t, c, d)
	var pods []corev1.Pod
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil && p.Labels["pod-template-hash"] == hash {
			pods = append(pods, p)
		}
	}
	if int32(len(pods)) != *d.Spec.Replicas {
		t.Fatalf("%d current pods, want %d", len(pods), *d.Spec.Replicas)
	}
	port := d.Spec.Template.Spec.Containers[0].Ports[0].ContainerPort
	probe := d.Spec.Template.Spec.Containers[0].ReadinessProbe.HTTPGet.Path
	for _, p := range pods {
		base := fmt.Sprintf("http://%s:%d", p.Status.PodIP, port)
		deadline := time.Now().Add(60 * time.Second)
		for {
			if res, err := http.Get(base + probe); err == nil {
				res.Body.Close()
				if res.StatusCode == 200 {
					break
				}
			}
			if time.Now().After(deadline) {
				log := "(no process)"
				if pr := k.Process(p.Name); pr != nil {
					log = pr.Log()
				}
				t.Fatalf("the apiserver of pod %s never answered %s%s 200 (kubelet: %v)\n%s", p.Name, base, probe, k.Events(), log)
			}
			time.Sleep(50 * time.Millisecond) // poll with a deadline
		}
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/models", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := http.DefaultClient.Do(req)
		must(t, err)
		var body bytes.Buffer
		_, _ = body.ReadFrom(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.Contains(body.String(), `"svc-2-0"`) {
			t.Errorf("GET /v1/models from pod %s: %d %s", p.Name, res.StatusCode, body.String())
		}
	}
	return pods
}

// currentTemplateHash is the pod-template-hash of the Deployment's current
// ReplicaSet (the one of its revision).
func currentTemplateHash(t *testing.T, c *kubetest.Cluster, d *appsv1.Deployment) string {
	t.Helper()
	const rev = "deployment.kubernetes.io/revision"
	l, err := c.Client.AppsV1().ReplicaSets(d.Namespace).List(context.Background(), metav1.ListOptions{
		LabelSelector: metav1.FormatLabelSelector(d.Spec.Selector)})
	must(t, err)
	for _, rs := range l.Items {
		if rs.Annotations[rev] == d.Annotations[rev] {
			return rs.Labels["pod-template-hash"]
		}
	}
	t.Fatalf("no ReplicaSet of revision %s", d.Annotations[rev])
	return ""
}

func waitKubeletEvent(t *testing.T, k *kubetest.Kubelet, ev string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !slices.Contains(k.Events(), ev) {
		if time.Now().After(deadline) {
			t.Fatalf("the fake kubelet never recorded %q: %v", ev, k.Events())
		}
		time.Sleep(20 * time.Millisecond) // poll with a deadline
	}
}
