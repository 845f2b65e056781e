package e2e

// The kubernetes runtime driver on a real control plane (kwokctl
// --runtime binary: etcd, kube-apiserver, controller manager, scheduler),
// with the fake kubelet of shared/testenv/kubetest running the real podagent
// of every runtime pod at its loopback pod IP, PostgreSQL and MinIO. The pod
// is rendered from the chart's own runtime pod template (helm template).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"gopkg.in/yaml.v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/testenv/kubetest"
)

type kubeWorld struct {
	e  *env
	c  *kubetest.Cluster
	ns string
	// kubeconfig impersonates the chart's API server ServiceAccount, bound
	// to the chart's Role: the driver works with exactly that RBAC.
	kubeconfig string
	sa         string
	s3         testenv.S3Env
	tmpl       string
	kubelet    *kubetest.Kubelet
	acc        account
	project    string
	// pool is the warm pool's size of the replicas (SVC_RUNTIME_WARM_POOL_SIZE).
	pool int
}

// kubeOpts shape a kubeWorld: the fake kubelet's hooks (hold: no process
// for the pod; orphan: the process outlives its deleted pod; waiting: the
// podagent container reported waiting, e.g. an image pull error) and extra
// `helm --set` values for the chart's runtime pod template.
type kubeOpts struct {
	hold    func(*corev1.Pod) bool
	orphan  func(*corev1.Pod) bool
	waiting func(*corev1.Pod) *corev1.ContainerStateWaiting
	sets    []string
	// pool is the warm pool's size (0: every cold start creates its pod).
	pool int
	// podEnv is added to every podagent's environment (test hooks).
	podEnv []string
}

// newKubeWorld: a runtime namespace holding the chart's S3 credential
// Secret, the chart's pod template, the fake kubelet, a project with a
// webhook channel.
func newKubeWorld(t testing.TB, o kubeOpts) *kubeWorld {
	t.Helper()
	w := &kubeWorld{e: newEnv(t), c: kubetest.Shared(t), s3: testenv.MinIO(t), pool: o.pool}
	w.ns = w.c.Namespace(t, "svc-rt")
	ctx := context.Background()
	_, err := w.c.Client.CoreV1().Secrets(w.ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "svc-secrets"},
		StringData: map[string]string{"s3-access-key": w.s3.AccessKey, "s3-secret-key": w.s3.SecretKey},
	}, metav1.CreateOptions{})
	must(t, err)
	w.tmpl = chartPodTemplate(t, w.ns, w.s3, o.sets...)
	w.sa, w.kubeconfig = chartRBAC(t, w.c, w.ns)
	w.kubelet = &kubetest.Kubelet{Cluster: w.c, Namespace: w.ns, Container: "podagent", Binary: kubePodagentBin(t),
		Group: "svc.dev/project-id", Hold: o.hold, Orphan: o.orphan, Waiting: o.waiting, ExtraEnv: o.podEnv}
	w.kubelet.Run(t)
	w.acc = w.e.account("free")
	w.project = w.e.admin("project", "create", "--workspace", w.acc.workspace, "--name", "kube")["id"].(string)
	w.e.admin("channel", "set", "--project", w.project, "--secret", "hook-secret")
	return w
}

// chartPodTemplate renders the chart's runtime pod template ConfigMap with
// helm and returns the template file the API server reads.
func chartPodTemplate(t testing.TB, ns string, s3 testenv.S3Env, sets ...string) string {
	t.Helper()
	helm := os.Getenv("SVC_HELM_BIN")
	if helm == "" {
		t.Fatal("SVC_HELM_BIN is not set: run the tests through `make test` (it builds the pinned helm with `make tools`)")
	}
	args := []string{"template", "svc", "../../charts/svc", "--namespace", ns, "--kube-version", kubetest.K8sVersion,
		"--set", "s3.endpoint=" + s3.Endpoint, "--set", "s3.bucket=" + s3.Bucket,
		"--show-only", "templates/runtime-pod-template-configmap.yaml"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	out, err := exec.Command(helm, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	var cm struct{ Data map[string]string }
	must(t, yaml.Unmarshal(out, &cm))
	tmpl := cm.Data["pod-template.yaml"]
	if tmpl == "" {
		t.Fatalf("no pod-template.yaml in %s", out)
	}
	p := filepath.Join(t.TempDir(), "pod-template.yaml")
	must(t, os.WriteFile(p, []byte(tmpl), 0o600))
	return p
}

// chartRBAC applies the chart's ServiceAccounts, Role and RoleBinding in ns
// and writes a kubeconfig that impersonates the API server's ServiceAccount.
func chartRBAC(t testing.TB, c *kubetest.Cluster, ns string) (sa, kubeconfig string) {
	t.Helper()
	out, err := exec.Command(os.Getenv("SVC_HELM_BIN"), "template", "svc", "../../charts/svc", "--namespace", ns,
		"--kube-version", kubetest.K8sVersion, "--show-only", "templates/rbac.yaml", "--show-only", "templates/serviceaccount.yaml").CombinedOutput()
	if err != nil {
		t.Fatalf("helm template (rbac): %v\n%s", err, out)
	}
	if res, err := c.Kubectl(context.Background(), string(out), "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply (chart RBAC): %v\n%s", err, res)
	}
	for _, doc := range strings.Split(string(out), "\n---") {
		var o struct {
			Kind     string
			Subjects []struct{ Name, Namespace string }
		}
		if yaml.Unmarshal([]byte(doc), &o) == nil && o.Kind == "RoleBinding" && len(o.Subjects) == 1 {
			sa = "system:serviceaccount:" + o.Subjects[0].Namespace + ":" + o.Subjects[0].Name
		}
	}
	if sa == "" {
		t.Fatalf("no RoleBinding subject in the chart's RBAC:\n%s", out)
	}
	return sa, c.ImpersonatingKubeconfig(t, sa)
}

// canI asks the API server whether the impersonated ServiceAccount may do
// verb on resource in ns; "pods/exec" is the exec subresource of pods
// (kubectl would read "pods/exec" as the pod named exec).
func (w *kubeWorld) canI(t *testing.T, verb, resource, ns string) bool {
	t.Helper()
	args := []string{"auth", "can-i", verb, resource, "--as", w.sa}
	if res, sub, ok := strings.Cut(resource, "/"); ok {
		args = []string{"auth", "can-i", verb, res, "--subresource", sub, "--as", w.sa}
	}
	if ns != "" {
		args = append(args, "-n", ns)
	}
	out, _ := w.c.Kubectl(context.Background(), "", args...)
	return strings.TrimSpace(out) == "yes"
}

// startReplica starts an API replica driving the cluster; its runtime pods
// call it back on its loopback address.
func (w *kubeWorld) startReplica(t testing.TB, extraEnv ...string) *api {
	t.Helper()
	port, err := testenv.FreePort()
	must(t, err)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(apiserverBin, "serve")
	cmd.Env = append(append(w.e.baseEnv(), "SVC_HTTP_ADDR="+addr,
		"SVC_STORAGE=s3", "SVC_S3_ENDPOINT="+w.s3.Endpoint, "SVC_S3_BUCKET="+w.s3.Bucket,
		"SVC_S3_ACCESS_KEY="+w.s3.AccessKey, "SVC_S3_SECRET_KEY="+w.s3.SecretKey,
		"SVC_RUNTIME_DRIVER=kubernetes", "SVC_KUBECONFIG="+w.kubeconfig, "SVC_RUNTIME_NAMESPACE="+w.ns,
		"SVC_RUNTIME_POD_TEMPLATE_FILE="+w.tmpl, "SVC_RUNTIME_POD_API_URL=http://"+addr,
		"SVC_RUNTIME_START_TIMEOUT=60s", fmt.Sprintf("SVC_RUNTIME_WARM_POOL_SIZE=%d", w.pool)), extraEnv...)
	logs := startProcess(t, "apiserver", cmd)
	a := &api{URL: "http://" + addr, cmd: cmd}
	waitReady(t, "apiserver", a.URL+"/readyz", 30*time.Second, logs)
	return a
}

func (w *kubeWorld) message(t testing.TB, a *api, text string) (*http.Response, []byte) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"message": text, "senderId": "kube-e2e"})
	return proxyDo(t, a.URL, w.project, w.acc.key, http.MethodPost, "/agent/channels/webhook/incoming", body, hookHeaders())
}

func (w *kubeWorld) pods(t testing.TB) []corev1.Pod {
	t.Helper()
	l, err := w.c.Client.CoreV1().Pods(w.ns).List(context.Background(),
		metav1.ListOptions{LabelSelector: "svc.dev/project-id=" + w.project})
	must(t, err)
	var out []corev1.Pod
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

func (w *kubeWorld) onePod(t testing.TB) corev1.Pod {
	t.Helper()
	pods := w.pods(t)
	if len(pods) != 1 {
		names := []string{}
		for _, p := range pods {
			names = append(names, p.Name)
		}
		t.Fatalf("runtime pods of the project: %v, want exactly one", names)
	}
	return pods[0]
}

func (w *kubeWorld) object(t *testing.T, key string) bool {
	t.Helper()
	mc, err := minio.New(w.s3.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(w.s3.AccessKey, w.s3.SecretKey, "")})
	must(t, err)
	_, err = mc.StatObject(context.Background(), w.s3.Bucket, key, minio.StatObjectOptions{})
	return err == nil
}

// waitEvent waits (bounded) until the fake kubelet recorded ev.
func (w *kubeWorld) waitEvent(t *testing.T, ev string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !slices.Contains(w.kubelet.Events(), ev) {
		if time.Now().After(deadline) {
			t.Fatalf("the fake kubelet never recorded %q: %v", ev, w.kubelet.Events())
		}
		time.Sleep(20 * time.Millisecond) // poll with a deadline
	}
}

// claimedSpare reports whether p is a spare of the warm pool a project
// claimed (its mode and generation are in its annotations and its claim,
// not in its environment).
func claimedSpare(p corev1.Pod) bool { return p.Annotations["svc.dev/spare-of-pool"] != "" }

// podMode is the sync mode the project's pod runs: its environment for a
// pod created for the project, its claim (annotation) for a claimed spare.
func podMode(p corev1.Pod) string {
	if claimedSpare(p) {
		return p.Annotations["svc.dev/cloud-sync-mode"]
	}
	return podEnv(p, "SVC_CLOUD_SYNC_MODE")
}

// waitPool waits (bounded) until replica a counts n warm spares.
func (w *kubeWorld) waitPool(t testing.TB, a *api, n int) {
	t.Helper()
	want := fmt.Sprintf("svc_runtime_warm_pool_size %d\n", n)
	deadline := time.Now().Add(90 * time.Second)
	for {
		res, err := http.Get(a.URL + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if strings.Contains(string(b), want) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the warm pool never held %d spares (kubelet: %v)", n, w.kubelet.Events())
		}
		time.Sleep(50 * time.Millisecond) // poll with a deadline
	}
}

// spares are the unclaimed spare pods of the namespace.
func (w *kubeWorld) spares(t testing.TB) []corev1.Pod {
	t.Helper()
	l, err := w.c.Client.CoreV1().Pods(w.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "svc.dev/spare"})
	must(t, err)
	var out []corev1.Pod
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

func podEnv(p corev1.Pod, name string) string {
	for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
		if c.Name != "podagent" {
			continue
		}
		for _, e := range c.Env {
			if e.Name == name {
				return e.Value
			}
		}
	}
	return ""
}

func (w *kubeWorld) graphCommits(t *testing.T, a *api) int {
	t.Helper()
	st, _, g := readsGet(t, a.URL+"/api/projects/"+w.project+"/checkpoints/graph", w.acc.key)
	if st != 200 {
		t.Fatalf("graph: %d %v", st, g)
	}
	commits, _ := g["commits"].([]any)
	return len(commits)
}

// One project's life on Kubernetes: cold start through the driver, a second
// replica without a second pod, a deleted pod recreated with its history, a
// mode change applied only by the replacing pod.
func TestKubernetesDriverEndToEnd(t *testing.T) {
	t.Parallel()
	for _, pool := range []int{0, 2} {
		t.Run(fmt.Sprintf("pool=%d", pool), func(t *testing.T) {
			t.Parallel()
			kubeDriverEndToEnd(t, pool)
		})
	}
}

func kubeDriverEndToEnd(t *testing.T, pool int) {
	w := newKubeWorld(t, kubeOpts{pool: pool})
	a, b := w.startReplica(t), w.startReplica(t)
	if pool > 0 {
		w.waitPool(t, a, pool)
		w.waitPool(t, b, pool)
	}

	// 0. Two replicas race for the project's first pod: one pod.
	type result struct {
		status int
		body   string
	}
	results := make(chan result, 2)
	for _, r := range []*api{a, b} {
		go func() {
			req, _ := http.NewRequest(http.MethodGet, r.URL+"/api/projects/"+w.project+"/agent-proxy/readyz", nil)
			req.Header.Set("Authorization", "Bearer "+w.acc.key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				results <- result{0, err.Error()}
				return
			}
			defer resp.Body.Close()
			var sb strings.Builder
			_, _ = io.Copy(&sb, resp.Body)
			results <- result{resp.StatusCode, sb.String()}
		}()
	}
	for range 2 {
		if r := <-results; r.status != 200 {
			t.Fatalf("readyz while racing: %d %s (kubelet: %v)", r.status, r.body, w.kubelet.Events())
		}
	}
	w.onePod(t)
	w.e.upstream.Script(agentScript("notes/a.txt", "first", "wrote a", nil))

	// 1. No pod yet: the message creates one, podagent answers, the turn
	// commits, persists .git and records its checkpoint.
	res, body := w.message(t, a, "write a")
	if res.StatusCode != 200 || !strings.Contains(string(body), "wrote a") {
		t.Fatalf("first message: %d %s (kubelet: %v)", res.StatusCode, body, w.kubelet.Events())
	}
	pod := w.onePod(t)
	if pod.Labels["svc.dev/project-id"] != w.project || pod.Labels["svc.dev/workspace-id"] != w.acc.workspace ||
		pod.Annotations["svc.dev/cloud-sync-mode"] != "git_only" || podMode(pod) != "git_only" ||
		pod.Annotations["svc.dev/runtime-generation"] == "" {
		t.Errorf("pod metadata/env: labels %v annotations %v", pod.Labels, pod.Annotations)
	}
	if _, spare := pod.Labels["svc.dev/spare"]; spare {
		t.Errorf("the project's pod is still labelled a spare: %v", pod.Labels)
	}
	switch {
	case pool == 0 && (claimedSpare(pod) || podEnv(pod, "SVC_POD_GENERATION") != pod.Annotations["svc.dev/runtime-generation"]):
		t.Errorf("without a pool the pod was not created for the project: %s env generation %q", pod.Name, podEnv(pod, "SVC_POD_GENERATION"))
	case pool > 0 && (!claimedSpare(pod) || podEnv(pod, "SVC_POD_UNASSIGNED") != "true" || podEnv(pod, "SVC_PROJECT_ID") != ""):
		// The spare's spec holds no project: the claim brought it.
		t.Errorf("with a warm pool the first message did not claim a spare: %s annotations %v", pod.Name, pod.Annotations)
	}
	sec, err := w.c.Client.CoreV1().Secrets(w.ns).Get(context.Background(), pod.Name, metav1.GetOptions{})
	if err != nil || len(sec.OwnerReferences) != 1 || sec.OwnerReferences[0].UID != pod.UID || len(sec.Data["token"]) == 0 {
		t.Errorf("token Secret: %v %+v", err, sec)
	}
	// A spare's Secret holds its bootstrap token, never a runtime token.
	if tok := string(sec.Data["token"]); claimedSpare(pod) != strings.HasPrefix(tok, "svc_pb_") || claimedSpare(pod) == strings.HasPrefix(tok, "svc_rt_") {
		t.Errorf("the pod's Secret holds %.7s…, claimed spare %v", tok, claimedSpare(pod))
	}
	if !w.object(t, w.project+"/repo.git.tar.gz") {
		t.Error("no durable .git at <projectId>/repo.git.tar.gz")
	}
	if n := w.e.checkpointCount(w.project); n != 1 {
		t.Errorf("checkpoint rows %d, want 1", n)
	}

	// 2. A second replica serves the same project from the stored
	// assignment: no second pod, no second podagent.
	w.e.upstream.Script(agentScript("notes/b.txt", "second", "wrote b", nil))
	if res, body := w.message(t, b, "write b"); res.StatusCode != 200 || !strings.Contains(string(body), "wrote b") {
		t.Fatalf("message through replica B: %d %s", res.StatusCode, body)
	}
	if p := w.onePod(t); p.UID != pod.UID {
		t.Errorf("replica B replaced the pod: %s → %s", pod.Name, p.Name)
	}
	starts := 0
	for _, ev := range w.kubelet.Events() {
		if ev == "start "+pod.Name {
			starts++
		}
	}
	if starts != 1 {
		t.Errorf("podagent processes started: %d, want 1 (%v)", starts, w.kubelet.Events())
	}

	// 3. The pod vanishes (deleted behind the API's back): the next message
	// recreates it, restored from the durable .git with its history.
	must(t, w.c.Client.CoreV1().Pods(w.ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{}))
	w.waitEvent(t, "exit "+pod.Name)
	w.e.upstream.Script(agentScript("notes/c.txt", "third", "wrote c", nil))
	if res, body := w.message(t, a, "write c"); res.StatusCode != 200 || !strings.Contains(string(body), "wrote c") {
		t.Fatalf("message after the pod vanished: %d %s (kubelet: %v)", res.StatusCode, body, w.kubelet.Events())
	}
	second := w.onePod(t)
	if second.UID == pod.UID {
		t.Fatal("the deleted pod is still the runtime")
	}
	if n := w.e.checkpointCount(w.project); n != 3 {
		t.Errorf("checkpoint rows %d, want 3", n)
	}
	// seed commit + three turns, all reachable from the restored history
	if n := w.graphCommits(t, a); n < 3 {
		t.Errorf("graph after the recreation shows %d commits, want the earlier turns too", n)
	}

	// 4. A mode change takes effect at the next pod assignment only (spec
	// 3.1): the running pod keeps git_only; a restart replaces it.
	w.e.admin("project", "set-sync-mode", "--id", w.project, "--mode", "dual_shadow")
	w.e.upstream.Script(agentScript("notes/d.txt", "fourth", "wrote d", nil))
	if res, body := w.message(t, b, "write d"); res.StatusCode != 200 {
		t.Fatalf("message after the mode change: %d %s", res.StatusCode, body)
	}
	if p := w.onePod(t); p.UID != second.UID || podMode(p) != "git_only" {
		t.Errorf("the mode change replaced or changed the running pod: %s mode %s", p.Name, podMode(p))
	}
	r := w.e.admin("project", "restart", "--id", w.project)
	if r["restarted"] != true {
		t.Fatalf("restart: %v", r)
	}
	// The replacement runs dual_shadow (cold start from S3, .git from the
	// API origin) and answers.
	res, body = w.message(t, a, "after restart")
	if res.StatusCode != 200 {
		t.Errorf("message after the restart into dual_shadow: %d %s", res.StatusCode, body)
	}
	third := w.onePod(t)
	replacement := w.kubelet.Process(third.Name)
	switch {
	case third.UID == second.UID || replacement == nil:
		t.Errorf("no replacement pod after the restart (kubelet: %v)", w.kubelet.Events())
	case claimedSpare(third):
		// A claimed spare: the claim carried the mode, the podagent runs it.
		if podMode(third) != "dual_shadow" || !strings.Contains(replacement.Log(), `"mode":"dual_shadow"`) {
			t.Errorf("the replacing spare was not claimed in dual_shadow: %v\n%s", third.Annotations, replacement.Log())
		}
	case !slices.Contains(replacement.Env, "SVC_CLOUD_SYNC_MODE=dual_shadow"):
		t.Errorf("no replacement podagent started with SVC_CLOUD_SYNC_MODE=dual_shadow (kubelet: %v)", w.kubelet.Events())
	}
	w.waitEvent(t, "exit "+second.Name)
	if pool == 0 {
		// The replaced pod's name may have run twice (recreated under the
		// same generation after it vanished, or under the next one when the
		// vanished pod was still terminating): every process started under
		// it stopped.
		starts, exits := 0, 0
		for _, ev := range w.kubelet.Events() {
			switch ev {
			case "start " + second.Name:
				starts++
			case "exit " + second.Name:
				exits++
			}
		}
		if starts == 0 || exits != starts {
			t.Errorf("the replaced pod's podagent did not stop (%d started, %d exited): %v", starts, exits, w.kubelet.Events())
		}
		return
	}
	// Two replicas refilled the pool all along: it settles at the size
	// asked, one spare per slot.
	deadline := time.Now().Add(60 * time.Second)
	for n := len(w.spares(t)); n != pool; n = len(w.spares(t)) {
		if time.Now().After(deadline) {
			t.Fatalf("spare pods: %d, want %d", n, pool)
		}
		time.Sleep(50 * time.Millisecond) // poll with a deadline
	}
	slots := map[string]bool{}
	for _, sp := range w.spares(t) {
		if slots[sp.Labels["svc.dev/spare"]] {
			t.Errorf("two spares in slot %s", sp.Labels["svc.dev/spare"])
		}
		slots[sp.Labels["svc.dev/spare"]] = true
	}
}

// The chart's Role grants the driver exactly pods and secrets in the runtime
// namespace, and nothing elsewhere (the end-to-end tests above run the driver
// as that ServiceAccount).
func TestKubernetesDriverRBAC(t *testing.T) {
	t.Parallel()
	w := newKubeWorld(t, kubeOpts{})
	other := w.c.Namespace(t, "svc-other")
	cases := []struct {
		verb, resource, ns string
		want               bool
	}{
		{"create", "pods", w.ns, true}, {"patch", "pods", w.ns, true}, {"watch", "pods", w.ns, true},
		{"delete", "pods", w.ns, true}, {"create", "secrets", w.ns, true}, {"patch", "secrets", w.ns, true},
		{"get", "secrets", w.ns, false}, {"list", "secrets", w.ns, false}, {"create", "services", w.ns, false},
		{"create", "deployments", w.ns, false}, {"create", "pods/exec", w.ns, false},
		{"create", "pods", other, false}, {"list", "pods", other, false}, {"create", "secrets", other, false},
		{"list", "nodes", "", false},
	}
	for _, c := range cases {
		if got := w.canI(t, c.verb, c.resource, c.ns); got != c.want {
			t.Errorf("%s can %s %s in %q = %v, want %v", w.sa, c.verb, c.resource, c.ns, got, c.want)
		}
	}
	// And a real call as the ServiceAccount outside its namespace is refused.
	out, err := w.c.Kubectl(context.Background(), "", "--kubeconfig", w.kubeconfig, "get", "pods", "-n", other)
	if err == nil || !strings.Contains(out, "forbidden") {
		t.Errorf("listing pods in another namespace as the ServiceAccount: %v %s", err, out)
	}
}

// A pod that never gets ready answers 503 agent_start_failed with
// Retry-After and the reason, within the start timeout.
func TestKubernetesDriverNeverReady(t *testing.T) {
	t.Parallel()
	w := newKubeWorld(t, kubeOpts{hold: func(*corev1.Pod) bool { return true }})
	a := w.startReplica(t, "SVC_RUNTIME_START_TIMEOUT=3s")
	began := time.Now()
	res, body := w.message(t, a, "hello")
	if res.StatusCode != 503 || errCode(t, body) != "agent_start_failed" || res.Header.Get("Retry-After") == "" {
		t.Fatalf("never-ready pod: %d %s (Retry-After %q)", res.StatusCode, body, res.Header.Get("Retry-After"))
	}
	if !strings.Contains(string(body), "not Ready within 3s") {
		t.Errorf("the 503 does not carry the reason: %s", body)
	}
	t.Logf("503 after %s: %s", time.Since(began).Round(time.Millisecond), body)
}

// An idle pod is stopped; its podagent runs the shutdown sequence (spec
// 10.2), which writes the cold-start tarball.
func TestKubernetesDriverIdleStop(t *testing.T) {
	t.Parallel()
	for _, pool := range []int{0, 1} {
		t.Run(fmt.Sprintf("pool=%d", pool), func(t *testing.T) {
			t.Parallel()
			kubeDriverIdleStop(t, pool)
		})
	}
}

func kubeDriverIdleStop(t *testing.T, pool int) {
	w := newKubeWorld(t, kubeOpts{pool: pool})
	// The driver stamps a pod's use when a request starts, so the idle time
	// must outlast one turn on a loaded machine, or the pod is gone before
	// onePod looks (seen with 2s under a full make test).
	a := w.startReplica(t, "SVC_RUNTIME_IDLE_TIMEOUT=6s")
	if pool > 0 {
		w.waitPool(t, a, pool)
	}
	w.e.upstream.Script(agentScript("notes/idle.txt", "idle", "wrote idle", nil))
	if res, body := w.message(t, a, "write idle"); res.StatusCode != 200 {
		t.Fatalf("message: %d %s", res.StatusCode, body)
	}
	pod := w.onePod(t)
	if claimedSpare(pod) != (pool > 0) {
		t.Errorf("pod %s: claimed spare %v with a pool of %d", pod.Name, claimedSpare(pod), pool)
	}
	if w.object(t, w.project+"/project-src.tar.gz") {
		t.Fatal("the cold-start tarball exists before shutdown")
	}
	w.waitEvent(t, "stop "+pod.Name)
	w.waitEvent(t, "exit "+pod.Name)
	if p := w.kubelet.Process(pod.Name); p == nil || p.Err != nil {
		t.Errorf("podagent did not exit cleanly after SIGTERM: %v", p.Err)
	}
	if !w.object(t, w.project+"/project-src.tar.gz") {
		t.Errorf("the shutdown sequence wrote no <projectId>/project-src.tar.gz; podagent log:\n%s", w.kubelet.Process(pod.Name).Log())
	}
	if pods := w.pods(t); len(pods) != 0 {
		t.Errorf("pods after idle stop: %d", len(pods))
	}
}

// A request longer than the idle time keeps its pod: the replica proxying
// it keeps stamping the pod's use while the request is in flight, so no
// reaper stops the pod under it; once the request has ended, the pod is
// idle-stopped as usual.
func TestKubernetesDriverKeepsABusyPod(t *testing.T) {
	t.Parallel()
	const idle = 3 * time.Second
	w := newKubeWorld(t, kubeOpts{})
	a := w.startReplica(t, fmt.Sprintf("SVC_RUNTIME_IDLE_TIMEOUT=%s", idle))
	gate := make(chan struct{})
	w.e.upstream.Script(agentScript("notes/busy.txt", "busy", "wrote busy", gate))
	type answer struct {
		status int
		body   []byte
		err    error
	}
	answered := make(chan answer, 1)
	began := time.Now()
	go func() {
		body, _ := json.Marshal(map[string]string{"message": "write busy", "senderId": "kube-e2e"})
		res, b, err := tryDo(http.MethodPost, a.URL+"/api/projects/"+w.project+"/agent-proxy/agent/channels/webhook/incoming",
			w.acc.key, body, hookHeaders())
		if err != nil {
			answered <- answer{err: err}
			return
		}
		answered <- answer{status: res.StatusCode, body: b}
	}()

	// The turn waits at its final answer. Wait until the pod's use is
	// stamped more than the idle time after the request began: a reaper
	// pass found the pod past its idle time, in use, and kept it.
	deadline := time.Now().Add(90 * time.Second)
	var pod corev1.Pod
	for {
		pods := w.pods(t)
		if len(pods) > 1 || (pod.Name != "" && (len(pods) == 0 || pods[0].Name != pod.Name)) {
			close(gate)
			t.Fatalf("the busy pod %q was replaced or stopped mid-request: %d pods now", pod.Name, len(pods))
		}
		if len(pods) == 1 {
			pod = pods[0]
			if at, err := time.Parse(time.RFC3339Nano, pod.Annotations["svc.dev/last-used"]); err == nil && at.Sub(began) > idle {
				break
			}
		}
		if time.Now().After(deadline) {
			close(gate)
			t.Fatalf("the busy pod's use was never stamped past the idle time (pod %q, annotations %v)", pod.Name, pod.Annotations)
		}
		time.Sleep(50 * time.Millisecond) // poll with a deadline
	}
	close(gate)
	ans := <-answered
	if ans.err != nil || ans.status != http.StatusOK || !strings.Contains(string(ans.body), "wrote busy") {
		t.Fatalf("the long request: %d %s (%v)", ans.status, ans.body, ans.err)
	}
	w.waitEvent(t, "stop "+pod.Name)
}

func kubePodagentBin(t testing.TB) string {
	t.Helper()
	p, err := podagentBinary()
	if err != nil {
		t.Fatalf("building podagent: %v", err)
	}
	return p
}

// BenchmarkKubernetesFirstReply: first webhook message → first reply for a
// project with no pod (driver, pod creation, fake kubelet, podagent cold
// start, one agent turn).
func BenchmarkKubernetesFirstReply(b *testing.B) {
	w := newKubeWorld(b, kubeOpts{})
	a := w.startReplica(b)
	w.e.upstream.Script(agentScript("notes/bench.txt", "bench", "wrote bench", nil))
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		w.project = w.e.admin("project", "create", "--workspace", w.acc.workspace, "--name", fmt.Sprintf("bench-%d", i))["id"].(string)
		w.e.admin("channel", "set", "--project", w.project, "--secret", "hook-secret")
		b.StartTimer()
		if res, body := w.message(b, a, "write bench"); res.StatusCode != 200 {
			b.Fatalf("first message: %d %s", res.StatusCode, body)
		}
	}
}

// BenchmarkKubernetesWarmRequest: a request through the API to a running
// pod (health: the API's routing and proxying, no agent turn); compare with
// BenchmarkWebhookProxyOverhead on the local driver.
func BenchmarkKubernetesWarmRequest(b *testing.B) {
	w := newKubeWorld(b, kubeOpts{})
	a := w.startReplica(b)
	health := func() int {
		res, _ := proxyDo(b, a.URL, w.project, w.acc.key, http.MethodGet, "/agent/channels/webhook/health", nil, nil)
		return res.StatusCode
	}
	// Health never starts a pod: /readyz through the proxy does.
	if res, body := proxyDo(b, a.URL, w.project, w.acc.key, http.MethodGet, "/readyz", nil, nil); res.StatusCode != 200 {
		b.Fatalf("readyz: %d %s", res.StatusCode, body)
	}
	if st := health(); st != 200 {
		b.Fatalf("health: %d", st)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if st := health(); st != 200 {
			b.Fatalf("health: %d", st)
		}
	}
}

// A spare of the warm pool dies mid-claim (it took the claim, its cold
// start has not begun): the project gets another pod within the same
// request, which is answered, and the turn is durable; the dead spare is
// gone.
func TestKubernetesDriverSpareKilledMidClaim(t *testing.T) {
	t.Parallel()
	hooks := t.TempDir()
	w := newKubeWorld(t, kubeOpts{pool: 1,
		podEnv: []string{"SVC_TEST_PAUSE_AT=spare-claimed", "SVC_TEST_HOOK_DIR=" + hooks}})
	a := w.startReplica(t)
	w.waitPool(t, a, 1)
	hook := filepath.Join(hooks, "spare-claimed")
	must(t, syscall.Mkfifo(hook, 0o644))
	w.e.upstream.Script(agentScript("notes/a.txt", "first", "wrote a", nil))
	type answer struct {
		res  *http.Response
		body []byte
	}
	answered := make(chan answer, 1)
	go func() {
		body, _ := json.Marshal(map[string]string{"message": "write a", "senderId": "kube-e2e"})
		res, b, err := tryDo(http.MethodPost, a.URL+"/api/projects/"+w.project+"/agent-proxy/agent/channels/webhook/incoming",
			w.acc.key, body, hookHeaders())
		if err != nil {
			res = &http.Response{StatusCode: 0}
			b = []byte(err.Error())
		}
		answered <- answer{res, b}
	}()
	// The spare took the claim and stopped at the hook: remove the hook
	// (the next spare passes it), then kill the claimed spare's podagent.
	got := make(chan struct{})
	go func() { _, _ = os.ReadFile(hook); close(got) }()
	select {
	case <-got:
	case <-time.After(90 * time.Second):
		t.Fatalf("no spare reached its claim (kubelet: %v)", w.kubelet.Events())
	}
	must(t, os.Remove(hook))
	claimed := w.onePod(t)
	if !claimedSpare(claimed) {
		t.Fatalf("the pod at the hook is not a claimed spare: %s %v", claimed.Name, claimed.Annotations)
	}
	proc := w.kubelet.Process(claimed.Name)
	if proc == nil {
		t.Fatalf("no process for %s", claimed.Name)
	}
	proc.Kill() // the container dies mid-claim
	ans := <-answered
	if ans.res.StatusCode != 200 || !strings.Contains(string(ans.body), "wrote a") {
		t.Fatalf("the message after the claimed spare died: %d %s (kubelet: %v)", ans.res.StatusCode, ans.body, w.kubelet.Events())
	}
	pod := w.onePod(t)
	if pod.UID == claimed.UID {
		t.Fatalf("the dead spare %s still serves the project", claimed.Name)
	}
	if n := w.e.checkpointCount(w.project); n != 1 {
		t.Errorf("checkpoint rows %d, want 1", n)
	}
	if !w.object(t, w.project+"/repo.git.tar.gz") {
		t.Error("no durable .git after the answered turn")
	}
	t.Logf("the dead spare %s was replaced by %s (claimed spare: %v)", claimed.Name, pod.Name, claimedSpare(pod))
}
