package e2e

// The chart on a real node: a kubelet with containerd, runc and
// the CNI bridge (shared/testenv/kubetest, node.go) joins a control plane of
// its own; our images, built by svc-image like `make images`, and a pause
// image built here are imported into containerd. `helm install` of the
// chart brings the API Deployment Ready through its real probes, against
// the harness's PostgreSQL, MinIO and fake upstream (reached by the pods at
// the bridge's gateway address). The kubernetes driver, in the API's pod,
// creates a runtime pod whose podagent runs as a native sidecar; a webhook
// turn gets its reply and is durable in MinIO; deleting the pod makes the
// kubelet SIGTERM the podagent, whose final flush lands within the grace
// period; the idle reaper's stop does the same.
//
// There is no kube-proxy or cluster DNS on the test node: the Services the
// chart's pods would use (the kube-apiserver's, the API's) are replaced by
// forwarders on the gateway — the API pod's in-cluster config through
// KUBERNETES_SERVICE_HOST/PORT, the runtime pods' SVC_API_URL through
// SVC_RUNTIME_POD_API_URL, both in apiserver.extraEnv.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/testenv/kubetest"
)

// nodeWorld is the chart installed on a real node.
type nodeWorld struct {
	e       *env
	node    *kubetest.Node
	ns      string
	s3      testenv.S3Env
	apiURL  string // the API pod's address (the host routes to the bridge)
	acc     account
	grace   time.Duration // the runtime pods' terminationGracePeriodSeconds
	mc      *minio.Client
	project string
}

// nodeImages builds the apiserver, podagent and pause images with svc-image
// under a tag of this test.
func nodeImages(t testing.TB) (pause kubetest.NodeImage, images []kubetest.NodeImage, repo, tag string) {
	t.Helper()
	bins := staticBinaries(t)
	pauseBin := filepath.Join(t.TempDir(), "pause")
	_, file, _, _ := runtime.Caller(0)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", pauseBin, "./kubetest/pause")
	cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..", "shared", "testenv")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build pause: %v\n%s", err, b)
	}
	repo, tag = "localhost/svc-e2e", fmt.Sprintf("node-%d", os.Getpid())
	out := t.TempDir()
	if b, err := exec.Command(bins["svc-image"], "-out", out, "-repo", repo, "-tag", tag,
		"apiserver="+bins["apiserver"], "podagent="+bins["podagent"], "pause="+pauseBin).CombinedOutput(); err != nil {
		t.Fatalf("svc-image: %v\n%s", err, b)
	}
	im := func(n string) kubetest.NodeImage {
		return kubetest.NodeImage{Archive: filepath.Join(out, "svc-"+n+".oci.tar"), Ref: repo + "/svc-" + n + ":" + tag}
	}
	return im("pause"), []kubetest.NodeImage{im("apiserver"), im("podagent")}, repo, tag
}

// hostPort is the host:port of u (a URL or a host:port).
func hostPort(t testing.TB, u string) string {
	t.Helper()
	if !strings.Contains(u, "://") {
		return u
	}
	p, err := url.Parse(u)
	must(t, err)
	return p.Host
}

// newNodeWorld starts the node and installs the chart with one API
// replica and the given idle timeout.
func newNodeWorld(t testing.TB, idle string, pool int) *nodeWorld {
	t.Helper()
	pause, images, repo, tag := nodeImages(t)
	n := kubetest.StartNode(t, pause, images...)
	w := &nodeWorld{e: newEnv(t), node: n, s3: testenv.MinIO(t), grace: 60 * time.Second}
	var err error
	w.mc, err = minio.New(w.s3.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(w.s3.AccessKey, w.s3.SecretKey, "")})
	must(t, err)
	ctx := context.Background()
	static := func(a string) func() string { return func() string { return a } }
	kubeAddr := n.Forward(t, static(n.APIServerAddr()))
	dbu, err := url.Parse(w.e.dbURL)
	must(t, err)
	dbu.Host = n.Forward(t, static(dbu.Host))
	s3Addr := n.Forward(t, static(w.s3.Endpoint))
	upstream := n.Forward(t, static(hostPort(t, w.e.upstream.BaseURL())))
	var apiPod struct {
		sync.Mutex
		addr string
	}
	apiFwd := n.Forward(t, func() string { apiPod.Lock(); defer apiPod.Unlock(); return apiPod.addr })

	w.ns = "svc-node"
	_, err = n.Cluster.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}}, metav1.CreateOptions{})
	must(t, err)
	_, err = n.Cluster.Client.CoreV1().Secrets(w.ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "svc-secrets"},
		StringData: map[string]string{"database-url": dbu.String(), "s3-access-key": w.s3.AccessKey,
			"s3-secret-key": w.s3.SecretKey, "runtime-auth-secret": "node-e2e-runtime-secret"},
	}, metav1.CreateOptions{})
	must(t, err)

	kubeHost, kubePort, _ := net.SplitHostPort(kubeAddr)
	var plans map[string]any
	must(t, yaml.Unmarshal([]byte(plansYAML), &plans))
	img := func(n string) map[string]any { return map[string]any{"repository": repo + "/svc-" + n, "tag": tag} }
	values := map[string]any{
		"models": map[string]any{
			"providers": []any{map[string]any{"name": "main", "type": "openai", "base_url": "http://" + upstream + "/v1", "api_key_env": "FAKE_UPSTREAM_KEY"}},
			"models": []any{map[string]any{"id": "svc-2-0", "display_name": "SVC 2.0", "tier": "standard", "provider": "main",
				"created": "2025-09-01", "upstream_model": "up-2", "price": map[string]any{"input_per_mtok": 3, "output_per_mtok": 15}}},
		},
		"plans": plans,
		"s3":    map[string]any{"endpoint": s3Addr, "bucket": w.s3.Bucket},
		"apiserver": map[string]any{"replicaCount": 1, "image": img("apiserver"),
			"extraEnv": []any{
				map[string]any{"name": "FAKE_UPSTREAM_KEY", "value": "upstream-secret"},
				map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": kubeHost},
				map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": kubePort},
				map[string]any{"name": "SVC_RUNTIME_POD_API_URL", "value": "http://" + apiFwd},
			}},
		"runtime": map[string]any{"idleTimeout": idle, "terminationGracePeriodSeconds": int(w.grace.Seconds()),
			"warmPool": map[string]any{"size": pool},
			"podagent": map[string]any{"image": img("podagent")},
			// The agent container is the platform's own image; the node's
			// pause stands in for it (it exits on SIGTERM).
			"agent": map[string]any{"image": img("pause")}},
	}
	vb, err := yaml.Marshal(values)
	must(t, err)
	vf := filepath.Join(t.TempDir(), "values.yaml")
	must(t, os.WriteFile(vf, vb, 0o600))

	began := time.Now()
	if out, err := helm(t, n.Cluster, "install", "svc", chartDir, "--namespace", w.ns, "--values", vf); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	dep := waitNodeAvailable(t, n, w.ns)
	t.Logf("helm install → API Deployment Available through its probes on the real node: %s", time.Since(began).Round(time.Millisecond))
	pods, err := n.Cluster.Client.CoreV1().Pods(w.ns).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(dep.Spec.Selector)})
	must(t, err)
	var ip string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && podReady(&p) {
			ip = p.Status.PodIP
		}
	}
	if ip == "" {
		t.Fatalf("no Ready API pod: %+v", pods.Items)
	}
	for _, p := range pods.Items {
		t.Logf("API pod %s on node %q: phase %s, IP %s, ready %v, %s", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.PodIP,
			podReady(&p), kubetest.PodSummary(&p))
	}
	apiPod.Lock()
	apiPod.addr = net.JoinHostPort(ip, "8080")
	apiPod.Unlock()
	w.apiURL = "http://" + apiPod.addr
	w.acc = w.e.account("free")
	return w
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitNodeAvailable waits (bounded) until the Deployment is Available: its
// pod passed the chart's readiness probe, run by the kubelet.
func waitNodeAvailable(t testing.TB, n *kubetest.Node, ns string) *appsv1.Deployment {
	t.Helper()
	deadline := time.Now().Add(4 * time.Minute)
	for {
		d, err := n.Cluster.Client.AppsV1().Deployments(ns).Get(context.Background(), "svc", metav1.GetOptions{})
		if err == nil && d.Status.AvailableReplicas == 1 && deploymentAvailable(d) {
			return d
		}
		if time.Now().After(deadline) {
			pods, _ := n.Cluster.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
			var s []string
			if pods != nil {
				for _, p := range pods.Items {
					s = append(s, p.Name+": "+kubetest.PodSummary(&p))
				}
			}
			t.Fatalf("the API Deployment is not Available after 4 min: %v\npods: %s\nkubelet:\n%s\ncontainerd:\n%s\ncontrol plane:\n%s",
				err, strings.Join(s, "\n"), n.Log("kubelet", 6000), n.Log("containerd", 3000), n.Cluster.ComponentLogs())
		}
		time.Sleep(250 * time.Millisecond) // poll with a deadline
	}
}

// newProject creates a project with a webhook channel.
func (w *nodeWorld) newProject(t testing.TB, name string) {
	t.Helper()
	w.project = w.e.admin("project", "create", "--workspace", w.acc.workspace, "--name", name)["id"].(string)
	w.e.admin("channel", "set", "--project", w.project, "--secret", "hook-secret")
}

func (w *nodeWorld) message(t testing.TB, text string) (*http.Response, []byte) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"message": text, "senderId": "node-e2e"})
	return proxyDo(t, w.apiURL, w.project, w.acc.key, http.MethodPost, "/agent/channels/webhook/incoming", body, hookHeaders())
}

// runtimePod is the project's one running runtime pod.
func (w *nodeWorld) runtimePod(t testing.TB) corev1.Pod {
	t.Helper()
	l, err := w.node.Cluster.Client.CoreV1().Pods(w.ns).List(context.Background(),
		metav1.ListOptions{LabelSelector: "svc.dev/project-id=" + w.project})
	must(t, err)
	if len(l.Items) != 1 {
		t.Fatalf("runtime pods of the project: %d, want 1", len(l.Items))
	}
	return l.Items[0]
}

// objectTime is the LastModified of key, or zero when it does not exist.
func (w *nodeWorld) objectTime(key string) time.Time {
	info, err := w.mc.StatObject(context.Background(), w.s3.Bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return time.Time{}
	}
	return info.LastModified
}

// waitFlushed waits (bounded by the grace period and a margin) until the
// shutdown sequence's cold-start tarball exists and the pod is gone, and
// returns how long after since the tarball landed.
func (w *nodeWorld) waitFlushed(t *testing.T, pod corev1.Pod, since time.Time) time.Duration {
	t.Helper()
	key := w.project + "/project-src.tar.gz"
	deadline := since.Add(w.grace + 30*time.Second)
	var landed time.Time
	for {
		if landed.IsZero() {
			landed = w.objectTime(key)
		}
		_, err := w.node.Cluster.Client.CoreV1().Pods(w.ns).Get(context.Background(), pod.Name, metav1.GetOptions{})
		if !landed.IsZero() && err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the stop: tarball at %v, pod get: %v; kubelet:\n%s", landed, err, w.node.Log("kubelet", 4000))
		}
		time.Sleep(100 * time.Millisecond) // poll with a deadline
	}
	// MinIO's LastModified has a second's resolution.
	took := landed.Sub(since.Truncate(time.Second))
	if took > w.grace {
		t.Errorf("the final flush landed %v after the stop, past terminationGracePeriodSeconds (%v)", took, w.grace)
	}
	return took
}

func TestKubernetesChartOnRealNode(t *testing.T) {
	t.Parallel()
	w := newNodeWorld(t, "25s", 0)
	ctx := context.Background()

	// 1. A project with no pod: the driver creates its pod, podagent runs
	// as a native sidecar, the turn is answered and durable in MinIO.
	w.newProject(t, "node")
	w.e.upstream.Script(agentScript("notes/a.txt", "on a real node", "wrote a", nil))
	began := time.Now()
	res, body := w.message(t, "write a")
	if res.StatusCode != 200 || !strings.Contains(string(body), "wrote a") {
		if r, err := http.Get(w.apiURL + "/readyz"); err == nil {
			b, _ := io.ReadAll(r.Body)
			r.Body.Close()
			t.Logf("GET %s/readyz: %d %s %v", w.apiURL, r.StatusCode, b, r.Header)
		}
		t.Fatalf("first message: %d %s\npods:\n%s\nkubelet:\n%s", res.StatusCode, body, w.node.PodLogs(w.ns, 6000), w.node.Log("kubelet", 2000))
	}
	t.Logf("first reply of a project with no pod: %s", time.Since(began).Round(time.Millisecond))
	pod := w.runtimePod(t)
	if len(pod.Spec.InitContainers) != 1 || pod.Spec.InitContainers[0].Name != "podagent" ||
		pod.Spec.InitContainers[0].RestartPolicy == nil || *pod.Spec.InitContainers[0].RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Fatalf("podagent is not a native sidecar: %+v", pod.Spec.InitContainers)
	}
	// The driver probes podagent itself; the kubelet's startup probe
	// (every 2 s) may report a moment later.
	for deadline := time.Now().Add(30 * time.Second); ; {
		st, cs := pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses
		if len(st) == 1 && st[0].State.Running != nil && st[0].Started != nil && *st[0].Started && st[0].RestartCount == 0 &&
			len(cs) == 1 && cs[0].State.Running != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the podagent sidecar and the agent container are not both running: %s", kubetest.PodSummary(&pod))
		}
		time.Sleep(200 * time.Millisecond) // poll with a deadline
		pod = w.runtimePod(t)
	}
	if w.objectTime(w.project + "/repo.git.tar.gz").IsZero() {
		t.Error("the turn is not durable: no <projectId>/repo.git.tar.gz in MinIO")
	}
	if !w.objectTime(w.project + "/project-src.tar.gz").IsZero() {
		t.Fatal("the cold-start tarball exists before any stop")
	}

	// 2. Deleting the pod: the kubelet stops the agent container, then
	// SIGTERMs podagent, whose shutdown writes the cold-start tarball
	// within the grace period.
	deleted := time.Now()
	must(t, w.node.Cluster.Client.CoreV1().Pods(w.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}))
	t.Logf("pod deleted → final flush in MinIO: %v (grace %v)", w.waitFlushed(t, pod, deleted), w.grace)

	// 3. The idle reaper: another project's pod, left idle, is stopped by
	// the driver; the same shutdown sequence lands.
	w.newProject(t, "node-idle")
	w.e.upstream.Script(agentScript("notes/b.txt", "idle", "wrote b", nil))
	if res, body := w.message(t, "write b"); res.StatusCode != 200 || !strings.Contains(string(body), "wrote b") {
		t.Fatalf("second project's message: %d %s", res.StatusCode, body)
	}
	idlePod := w.runtimePod(t)
	var stopped time.Time
	deadline := time.Now().Add(3 * time.Minute)
	for stopped.IsZero() {
		p, err := w.node.Cluster.Client.CoreV1().Pods(w.ns).Get(ctx, idlePod.Name, metav1.GetOptions{})
		if err != nil || p.DeletionTimestamp != nil {
			stopped = time.Now() // (deletionTimestamp is when the grace period ends)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the idle pod was never stopped (idle timeout 25s): %s", kubetest.PodSummary(p))
		}
		time.Sleep(100 * time.Millisecond) // poll with a deadline
	}
	t.Logf("idle stop → final flush in MinIO: %v", w.waitFlushed(t, idlePod, stopped))
}

// BenchmarkKubernetesRealNodeFirstReply: first webhook message → first
// reply for a project with no pod on the real node, the images already in
// containerd (driver, pod creation, scheduling, sandbox and CNI, both
// containers started, podagent's cold start and startup probe, one agent
// turn). Compare with BenchmarkKubernetesFirstReply on the kwok node. Each
// measured project's pod is stopped (clock stopped) before the next, so the
// node's requests never run out however many rounds: docs/scale.md has the
// command, -benchtime=10x. The phases come from the API's
// svc_runtime_pod_start_phase_seconds (means per cold start, as s/<phase>).
func BenchmarkKubernetesRealNodeFirstReply(b *testing.B) {
	for _, pool := range []int{0, 2} {
		b.Run(fmt.Sprintf("pool=%d", pool), func(b *testing.B) { realNodeFirstReply(b, pool) })
	}
}

// realNodeFirstReply is one variant: without a warm pool every first
// message creates its project's pod (phases queued, created, …); with one,
// it claims a spare (phase claimed), and the pool is full again (clock
// stopped) before the next project's message.
func realNodeFirstReply(b *testing.B, pool int) {
	w := newNodeWorld(b, "30m", pool)
	w.e.upstream.Script(agentScript("notes/bench.txt", "bench", "wrote bench", nil))
	before := startPhases(b, w.apiURL)
	var total time.Duration
	var each []time.Duration
	b.ResetTimer() // the node, the control plane and the install are not a first reply
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		w.newProject(b, fmt.Sprintf("bench-%d", i))
		if pool > 0 {
			waitWarmPool(b, w.apiURL, pool)
		}
		b.StartTimer()
		began := time.Now()
		if res, body := w.message(b, "write bench"); res.StatusCode != 200 {
			b.Fatalf("first message: %d %s", res.StatusCode, body)
		}
		total += time.Since(began)
		each = append(each, time.Since(began))
		b.StopTimer()
		w.stopRuntimePods(b)
		b.StartTimer()
	}
	after := startPhases(b, w.apiURL)
	probed := 0.0
	for phase, a := range after {
		if n := a.count - before[phase].count; n > 0 {
			mean := (a.sum - before[phase].sum) / n
			b.ReportMetric(mean, "s/"+phase)
			if phase == "probed" {
				probed = mean
			}
		}
	}
	if b.N > 0 && probed > 0 {
		b.ReportMetric(total.Seconds()/float64(b.N)-probed, "s/restore+reply")
	}
	if len(each) > 0 {
		b.ReportMetric(pct(each, 50).Seconds(), "s/p50")
		b.ReportMetric(pct(each, 95).Seconds(), "s/p95")
		b.ReportMetric(slices.Max(each).Seconds(), "s/max")
	}
}

// waitWarmPool waits (bounded) until the API at apiURL counts n warm spares.
func waitWarmPool(t testing.TB, apiURL string, n int) {
	t.Helper()
	want := fmt.Sprintf("svc_runtime_warm_pool_size %d\n", n)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if res, err := http.Get(apiURL + "/metrics"); err == nil {
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if strings.Contains(string(b), want) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the warm pool never held %d spares", n)
		}
		time.Sleep(100 * time.Millisecond) // poll with a deadline
	}
}

// stopRuntimePods deletes the project's runtime pods and waits (bounded)
// until they are gone, so their requests are free for the next project.
func (w *nodeWorld) stopRuntimePods(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	sel := metav1.ListOptions{LabelSelector: "svc.dev/project-id=" + w.project}
	must(t, w.node.Cluster.Client.CoreV1().Pods(w.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, sel))
	deadline := time.Now().Add(3 * time.Minute)
	for {
		l, err := w.node.Cluster.Client.CoreV1().Pods(w.ns).List(ctx, sel)
		if err == nil && len(l.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the runtime pods of %s did not stop within 3 min", w.project)
		}
		time.Sleep(100 * time.Millisecond) // poll with a deadline
	}
}

// phaseTotals is one phase of svc_runtime_pod_start_phase_seconds.
type phaseTotals struct{ sum, count float64 }

// startPhases reads the API's cold-start phase histograms from /metrics.
func startPhases(t testing.TB, apiURL string) map[string]phaseTotals {
	t.Helper()
	res, err := http.Get(apiURL + "/metrics")
	must(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	must(t, err)
	return parsePhases(string(b))
}

func parsePhases(text string) map[string]phaseTotals {
	out := map[string]phaseTotals{}
	const name = "svc_runtime_pod_start_phase_seconds"
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok {
			continue
		}
		kind, rest, ok := strings.Cut(rest, `{phase="`)
		if !ok || (kind != "_sum" && kind != "_count") {
			continue
		}
		phase, val, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(val, &v); err != nil {
			continue
		}
		pt := out[phase]
		if kind == "_sum" {
			pt.sum = v
		} else {
			pt.count = v
		}
		out[phase] = pt
	}
	return out
}

// BenchmarkKubernetesRealNodeWarmRequest: a request through the API pod to
// a running runtime pod on the real node (health: routing and proxying
// across the bridge, no agent turn).
func BenchmarkKubernetesRealNodeWarmRequest(b *testing.B) {
	w := newNodeWorld(b, "30m", 0)
	w.newProject(b, "bench-warm")
	health := func() int {
		res, _ := proxyDo(b, w.apiURL, w.project, w.acc.key, http.MethodGet, "/agent/channels/webhook/health", nil, nil)
		return res.StatusCode
	}
	// Health never starts a pod: /readyz through the proxy does.
	if res, body := proxyDo(b, w.apiURL, w.project, w.acc.key, http.MethodGet, "/readyz", nil, nil); res.StatusCode != 200 {
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
