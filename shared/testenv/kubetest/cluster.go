// Package kubetest is the Kubernetes part of the test harness (docs/design.md §7):
// a real control plane — etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler — started by kwokctl with
// `--runtime binary` on 127.0.0.1, plus one kwok fake node whose podCIDR
// (127.1.0.0/24) gives pods loopback IPs. kwok runs no containers; Kubelet
// plays the kubelet for the podagent sidecar (kubelet.go). StartNode
// (node.go) is the real node: a kubelet with containerd, runc and the CNI
// bridge, for the proof that the chart runs. The binaries are
// built by `make tools` into ~/.cache/svc-tools/<tool>/<version>/
// (scripts/kube-tools.sh).
//
// One cluster per test binary: Shared starts it on first use and Main
// (testenv.Main) deletes it.
package kubetest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/svc-dev/svc/shared/testenv"
)

// Versions of the control plane, as `make tools` builds them.
const (
	K8sVersion  = "v1.37.2"
	EtcdVersion = "v3.6.16"
	KwokVersion = "v0.8.0"
)

// NodeName is the fake node pods are scheduled to.
const NodeName = "kwok-node-0"

// ToolsDir is $SVC_TOOLS_DIR or ~/.cache/svc-tools.
func ToolsDir() string {
	if d := os.Getenv("SVC_TOOLS_DIR"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "svc-tools")
}

// Tool is the path of a control-plane binary; a missing one is an error
// telling how to build it.
func Tool(name string) (string, error) {
	v := K8sVersion
	switch name {
	case "etcd":
		v = EtcdVersion
	case "kwok", "kwokctl":
		v = KwokVersion
	}
	p := filepath.Join(ToolsDir(), name, v, name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("kubetest: %s %s not found at %s: run `make tools` (builds the control plane from the Go module proxy, ~7 min once)", name, v, p)
	}
	return p, nil
}

// kwokctlConfig: everything on 127.0.0.1, on the harness's ports
// (ports.go); kubeVersion tells kwokctl which flags the binaries it starts
// understand; kubectl is ours (kwokctl would download its own for its
// health checks).
func kwokctlConfig(kubectl string, sans []string, ports clusterPorts) string {
	s := "kind: KwokctlConfiguration\napiVersion: config.kwok.x-k8s.io/v1alpha1\noptions:\n" +
		"  bindAddress: 127.0.0.1\n  kubeVersion: " + K8sVersion + "\n  kwokVersion: " + KwokVersion + "\n" +
		"  kubectlBinary: " + kubectl + "\n" + ports.options()
	if len(sans) > 0 {
		s += "  kubeApiserverCertSANs: [" + strings.Join(sans, ", ") + "]\n"
	}
	return s
}

// Options shape a control plane.
type Options struct {
	// CertSANs are extra names of the kube-apiserver's serving certificate
	// (the address the real node's pods reach it at).
	CertSANs []string
	// NoFakeNode: no kwok node (the real node is the only one).
	NoFakeNode bool
}

// Cluster is a running control plane.
type Cluster struct {
	Name       string
	Kubeconfig string
	Config     *rest.Config
	Client     k8s.Interface
	workdir    string
	kwokctl    string
}

// Start creates a cluster (3–5 s warm) with one fake node.
func Start(ctx context.Context) (*Cluster, error) { return StartWith(ctx, Options{}) }

// StartWith creates a cluster shaped by o. A control plane that is not
// served within attemptTimeout is deleted, its components' logs kept for the
// error, and started again under a new name and fresh ports: a
// kube-apiserver that never listens would otherwise cost the whole test
// binary. Starts on one machine take turns, each on ports of its own
// (ports.go).
func StartWith(ctx context.Context, o Options) (*Cluster, error) {
	var failures []string
	for attempt := 1; attempt <= startAttempts; attempt++ {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		c, err := startOnce(actx, o, attempt)
		cancel()
		if err == nil {
			if attempt > 1 {
				fmt.Fprintf(os.Stderr, "kubetest: control plane up on attempt %d; earlier:\n%s\n", attempt, strings.Join(failures, "\n"))
			}
			return c, nil
		}
		failures = append(failures, fmt.Sprintf("attempt %d: %v", attempt, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("kubetest: no control plane after %d attempts:\n%s", len(failures), strings.Join(failures, "\n"))
}

const (
	startAttempts = 3
	// attemptTimeout bounds one kwokctl create: a healthy start takes 3–5 s
	// warm and under 30 s on a loaded machine.
	attemptTimeout = 100 * time.Second
)

func startOnce(ctx context.Context, o Options, attempt int) (*Cluster, error) {
	bins := map[string]string{}
	for _, n := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kwokctl", "kubectl"} {
		p, err := Tool(n)
		if err != nil {
			return nil, err
		}
		bins[n] = p
	}
	// The lock is held until kwokctl create returns: by then the picked
	// ports are bound, and the next start's picks see them taken.
	unlock, err := lockClusterStarts()
	if err != nil {
		return nil, err
	}
	defer unlock()
	ports, err := pickPorts()
	if err != nil {
		return nil, err
	}
	workdir, err := os.MkdirTemp("", "svc-kube-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{Name: fmt.Sprintf("svc-%d-%d", os.Getpid(), attempt), workdir: workdir, kwokctl: bins["kwokctl"],
		Kubeconfig: filepath.Join(workdir, "kubeconfig")}
	cfg := filepath.Join(workdir, "kwokctl.yaml")
	if err := os.WriteFile(cfg, []byte(kwokctlConfig(bins["kubectl"], o.CertSANs, ports)), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bins["kwokctl"], "--config", cfg, "--name", c.Name, "create", "cluster",
		"--runtime", "binary",
		"--etcd-binary", bins["etcd"], "--kube-apiserver-binary", bins["kube-apiserver"],
		"--kube-controller-manager-binary", bins["kube-controller-manager"],
		"--kube-scheduler-binary", bins["kube-scheduler"], "--kwok-controller-binary", bins["kwok"],
		"--kubeconfig", c.Kubeconfig, "--wait", "60s")
	if o.NoFakeNode {
		// The kwok controller fakes the status of every node's pods (a pod IP
		// from its own CIDR, Running, Ready): with a real node it would claim
		// that node's pods before the kubelet reports them.
		cmd.Args = append(cmd.Args, "--disable", "kwok-controller")
	}
	cmd.Env = c.env()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		logs := c.ComponentLogs()
		c.Delete()
		return nil, fmt.Errorf("kwokctl create cluster: %v\n%s\n%s", err, lastLines(out.String(), 6), logs)
	}
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		c.Delete()
		return nil, err
	}
	if want := fmt.Sprintf("127.0.0.1:%d", ports.KubeApiserver); !strings.HasSuffix(c.Config.Host, want) {
		c.Delete()
		return nil, fmt.Errorf("kubetest: kwokctl put the kube-apiserver at %s, not the picked %s", c.Config.Host, want)
	}
	if c.Client, err = k8s.NewForConfig(c.Config); err != nil {
		c.Delete()
		return nil, err
	}
	if o.NoFakeNode {
		return c, nil
	}
	if err := c.AddNode(ctx, NodeName, "127.1.0.0/24", nil); err != nil {
		c.Delete()
		return nil, err
	}
	return c, nil
}

// ComponentLogs is the end of each control-plane component's log
// (kwokctl writes them under <workdir>/clusters/<name>/logs).
func (c *Cluster) ComponentLogs() string {
	files, _ := filepath.Glob(filepath.Join(c.workdir, "clusters", c.Name, "logs", "*.log"))
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		fmt.Fprintf(&b, "--- %s (last lines)\n%s\n", filepath.Base(f), lastLines(string(data), 15))
	}
	return b.String()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (c *Cluster) env() []string {
	return append(os.Environ(), "KWOK_WORKDIR="+c.workdir, "KUBECONFIG="+c.Kubeconfig)
}

// AddNode registers a fake node and waits until pods can be scheduled to
// it; kwok takes every node annotated kwok.x-k8s.io/node=fake and assigns its
// pods IPs from its podCIDR (a loopback /24 here: 127.1.0.0/24 is
// NodeName's).
func (c *Cluster) AddNode(ctx context.Context, name, podCIDR string, labels map[string]string) error {
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("110")}
	l := map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
		"kubernetes.io/arch": "amd64", "type": "kwok"}
	for k, v := range labels {
		l[k] = v
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"}},
		Spec:   corev1.NodeSpec{PodCIDR: podCIDR},
		Status: corev1.NodeStatus{Allocatable: capacity, Capacity: capacity},
	}
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kubetest: creating the fake node: %w", err)
	}
	// Ready once kwok took it over, and schedulable once the node lifecycle
	// controller removed its not-ready taint (until then the scheduler
	// refuses pods: "untolerated taint").
	deadline := time.Now().Add(60 * time.Second)
	for {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err == nil && nodeSchedulable(n) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kubetest: the fake node %s is not Ready and untainted after 60s: %v", name, err)
		}
		time.Sleep(100 * time.Millisecond) // poll with a deadline
	}
}

func nodeSchedulable(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			return false
		}
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Kubectl runs kubectl against the cluster and returns its combined output.
func (c *Cluster) Kubectl(ctx context.Context, stdin string, args ...string) (string, error) {
	bin, err := Tool("kubectl")
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.String(), err
}

// ImpersonatingKubeconfig writes a kubeconfig (in a test temp dir) whose
// user acts as user (e.g. system:serviceaccount:<ns>:<name>): the RBAC a
// chart grants that ServiceAccount applies to every call made with it.
func (c *Cluster) ImpersonatingKubeconfig(t testing.TB, user string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = user
	}
	p := filepath.Join(t.TempDir(), "kubeconfig-as")
	if err := clientcmd.WriteToFile(*cfg, p); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	return p
}

// Namespace creates a fresh namespace for one test and deletes it after.
func (c *Cluster) Namespace(t testing.TB, prefix string) string {
	t.Helper()
	ns, err := c.Client.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kubetest: creating a namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// Delete stops the control plane and removes its files.
func (c *Cluster) Delete() {
	cmd := exec.Command(c.kwokctl, "--name", c.Name, "delete", "cluster")
	cmd.Env = c.env()
	_ = cmd.Run()
	_ = os.RemoveAll(c.workdir)
}

var shared struct {
	sync.Once
	c   *Cluster
	err error
}

// Shared is the cluster of this test binary, started on first use and
// deleted by testenv.Main. A missing binary fails the test with how to build
// it (never a skip).
func Shared(t testing.TB) *Cluster {
	t.Helper()
	shared.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), startAttempts*attemptTimeout)
		defer cancel()
		began := time.Now()
		shared.c, shared.err = Start(ctx)
		if shared.err == nil {
			testenv.OnTeardown(shared.c.Delete)
			fmt.Fprintf(os.Stderr, "kubetest: control plane up in %s (%s)\n", time.Since(began).Round(time.Millisecond), shared.c.Kubeconfig)
		}
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.c
}
