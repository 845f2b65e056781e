package kubetest

// The real node: a kubelet built from the Go module proxy like
// the control plane, with containerd, runc and the Debian CNI plugins, joins
// a control plane of its own (no kwok node). Everything the node runs lives
// under one temp dir — containerd's config, root, state and socket, the
// kubelet's root, pod logs, the CNI config and host-local's leases — and in a
// bridge and network namespaces the node creates: pods get addresses from a
// /24 inside the benchmarking range 198.18.0.0/15 (never routed off the
// machine, ipMasq off), the host is the bridge's gateway. Images come from
// OCI archives imported with `ctr images import`; the sandbox image is a
// pause built here (pause/), so the node needs no registry.
//
// There is no kube-proxy and no cluster DNS: Forward listens on the
// gateway address and relays to a host loopback service (PostgreSQL, MinIO,
// the kube-apiserver) or to a pod, standing in for a Service address.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Node is a real kubelet node and its control plane.
type Node struct {
	Cluster *Cluster
	Name    string
	Bridge  string // the pods' bridge (svcbr<N>)
	Gateway string // the host's address on it: 198.18.<N>.1
	Subnet  string // 198.18.<N>.0/24
	dir     string
	sock    string
	logs    map[string]*bytes.Buffer
	logsMu  sync.Mutex
	procs   map[string]*exec.Cmd
}

// NodeImage is an OCI archive to import and the reference it carries.
type NodeImage struct{ Archive, Ref string }

// NeedNode fails (never skips) the test when the node's parts are missing:
// root, containerd, ctr, runc, the CNI plugins, ip, the kubelet.
func NeedNode(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("kubetest: the real node needs root (containerd, kubelet, a bridge)")
	}
	for _, b := range []string{"containerd", "ctr", "runc", "ip"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Fatalf("kubetest: %s not found: .ci/run installs containerd, runc, containernetworking-plugins (apt)", b)
		}
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniBinDir, p)); err != nil {
			t.Fatalf("kubetest: CNI plugin %s not in %s: apt-get install containernetworking-plugins", p, cniBinDir)
		}
	}
	if _, err := Tool("kubelet"); err != nil {
		t.Fatal(err)
	}
}

const cniBinDir = "/usr/lib/cni"

// StartNode claims a bridge and /24, starts a control plane whose serving
// certificate names the gateway, containerd with pause and images imported,
// and a kubelet; it returns once the node is Ready and schedulable.
// Everything is stopped and removed when the test ends.
func StartNode(t testing.TB, pause NodeImage, images ...NodeImage) *Node {
	t.Helper()
	NeedNode(t)
	n := &Node{logs: map[string]*bytes.Buffer{}, procs: map[string]*exec.Cmd{}}
	n.claimBridge(t)
	var err error
	n.dir, err = os.MkdirTemp("", "svc-node-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.teardown)
	n.Name = "svc-node-" + strings.TrimPrefix(n.Bridge, "svcbr")
	ctx, cancel := context.WithTimeout(context.Background(), startAttempts*attemptTimeout)
	defer cancel()
	began := time.Now()
	if n.Cluster, err = StartWith(ctx, Options{CertSANs: []string{n.Gateway}, NoFakeNode: true}); err != nil {
		t.Fatal(err)
	}
	t.Logf("kubetest: control plane up in %s", time.Since(began).Round(time.Millisecond))
	n.startContainerd(t, pause.Ref)
	for _, im := range append([]NodeImage{pause}, images...) {
		n.ctr(t, "images", "import", im.Archive)
	}
	n.startKubelet(t)
	n.waitReady(t)
	t.Logf("kubetest: node %s Ready in %s (pods on %s)", n.Name, time.Since(began).Round(time.Millisecond), n.Subnet)
	return n
}

// claimBridge creates the first free svcbr<N> (N in 0..255) with gateway
// 198.18.N.1/24; creating the link is the claim, so concurrent test binaries
// get different subnets.
func (n *Node) claimBridge(t testing.TB) {
	t.Helper()
	for i := 0; i < 256; i++ {
		name := fmt.Sprintf("svcbr%d", i)
		if out, err := exec.Command("ip", "link", "add", name, "type", "bridge").CombinedOutput(); err != nil {
			if strings.Contains(string(out), "exists") {
				continue
			}
			t.Fatalf("kubetest: ip link add %s: %v %s", name, err, out)
		}
		n.Bridge, n.Gateway, n.Subnet = name, fmt.Sprintf("198.18.%d.1", i), fmt.Sprintf("198.18.%d.0/24", i)
		t.Cleanup(func() { _ = exec.Command("ip", "link", "del", name).Run() })
		for _, args := range [][]string{{"addr", "add", n.Gateway + "/24", "dev", name}, {"link", "set", name, "up"}} {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				t.Fatalf("kubetest: ip %v: %v %s", args, err, out)
			}
		}
		return
	}
	t.Fatal("kubetest: no free svcbr<N> bridge")
}

func (n *Node) path(p ...string) string { return filepath.Join(append([]string{n.dir}, p...)...) }

// start runs a node process with its output kept (Log).
func (n *Node) start(t testing.TB, name string, cmd *exec.Cmd) {
	t.Helper()
	var buf bytes.Buffer
	w := lockedBuf{b: &buf, mu: &n.logsMu}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("kubetest: starting %s: %v", name, err)
	}
	n.logsMu.Lock()
	n.logs[name], n.procs[name] = &buf, cmd
	n.logsMu.Unlock()
}

type lockedBuf struct {
	b  *bytes.Buffer
	mu *sync.Mutex
}

func (w lockedBuf) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// PodLogs is what the containers of the pods in namespace ns wrote (the
// kubelet's pod log files), the last limit bytes of each, for failure
// messages.
func (n *Node) PodLogs(ns string, limit int) string {
	var out strings.Builder
	files, _ := filepath.Glob(n.path("pod-logs", ns+"_*", "*", "*.log"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if limit > 0 && len(b) > limit {
			b = b[len(b)-limit:]
		}
		rel, _ := filepath.Rel(n.path("pod-logs"), f)
		fmt.Fprintf(&out, "== %s\n%s\n", rel, b)
	}
	return out.String()
}

// Log is the output of the node's containerd or kubelet so far (its last
// limit bytes when limit > 0).
func (n *Node) Log(name string, limit int) string {
	n.logsMu.Lock()
	defer n.logsMu.Unlock()
	b := n.logs[name]
	if b == nil {
		return ""
	}
	s := b.String()
	if limit > 0 && len(s) > limit {
		s = s[len(s)-limit:]
	}
	return s
}

func (n *Node) startContainerd(t testing.TB, sandboxImage string) {
	t.Helper()
	n.sock = n.path("containerd.sock")
	cni := n.path("cni")
	for _, d := range []string{cni, n.path("cni-leases"), n.path("containerd")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// isGateway false: the bridge already holds the gateway address
	// (claimBridge) and the plugin leaves net.ipv4.ip_forward alone; pods get
	// no default route, only their /24 — nothing they send leaves the
	// machine.
	conflist := fmt.Sprintf(`{"cniVersion": "0.4.0", "name": "svc-%[1]s", "plugins": [{
  "type": "bridge", "bridge": %[1]q, "isGateway": false, "ipMasq": false, "hairpinMode": true,
  "ipam": {"type": "host-local", "dataDir": %[2]q, "ranges": [[{"subnet": %[3]q, "gateway": %[4]q}]]}}]}`,
		n.Bridge, n.path("cni-leases"), n.Subnet, n.Gateway)
	if err := os.WriteFile(filepath.Join(cni, "10-svc.conflist"), []byte(conflist), 0o600); err != nil {
		t.Fatal(err)
	}
	runc, _ := exec.LookPath("runc")
	// restrict_oom_score_adj: root here lacks CAP_SYS_RESOURCE, so runc
	// cannot lower a process's oom_score_adj below containerd's; without it
	// every sandbox (the CRI asks -998) fails "can't get final child's PID
	// from pipe: EOF".
	cfg := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing"]
[grpc]
  address = %[3]q
[ttrpc]
  address = "%[3]s.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = %[6]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[7]q
    conf_dir = %[8]q
    max_conf_num = 1
`, n.path("containerd", "root"), n.path("containerd", "state"), n.sock, n.path("containerd", "opt"),
		sandboxImage, runc, cniBinDir, cni)
	p := n.path("containerd.toml")
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	bin, _ := exec.LookPath("containerd")
	n.start(t, "containerd", exec.Command(bin, "--config", p))
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := n.ctrOut("version"); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubetest: containerd not serving after 30 s:\n%s", n.Log("containerd", 4000))
		}
		time.Sleep(100 * time.Millisecond) // poll with a deadline
	}
}

func (n *Node) ctrOut(args ...string) (string, error) {
	out, err := exec.Command("ctr", append([]string{"--address", n.sock, "--namespace", "k8s.io"}, args...)...).CombinedOutput()
	return string(out), err
}

func (n *Node) ctr(t testing.TB, args ...string) string {
	t.Helper()
	out, err := n.ctrOut(args...)
	if err != nil {
		t.Fatalf("kubetest: ctr %v: %v\n%s", args, err, out)
	}
	return out
}

// kubeletConfig: this kernel's cgroup v1 (failCgroupV1: false, cgroupfs,
// no QoS cgroups, nothing enforced on node allocatable), swap allowed, the
// kubelet's own ports on loopback, no eviction or image GC thresholds that a
// busy test disk could trip.
func (n *Node) kubeletConfig(port, healthz int) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
containerRuntimeEndpoint: unix://%s
podLogsDir: %s
resolvConf: ""
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
nodeStatusUpdateFrequency: 2s
syncFrequency: 5s
`, port, healthz, n.sock, n.path("pod-logs"))
}

func (n *Node) startKubelet(t testing.TB) {
	t.Helper()
	bin, err := Tool("kubelet")
	if err != nil {
		t.Fatal(err)
	}
	var ports [2]int
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	cfg := n.path("kubelet.yaml")
	if err := os.WriteFile(cfg, []byte(n.kubeletConfig(ports[0], ports[1])), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(n.path("pod-logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	n.start(t, "kubelet", exec.Command(bin, "--config", cfg, "--kubeconfig", n.Cluster.Kubeconfig,
		"--root-dir", n.path("kubelet"), "--hostname-override", n.Name, "--node-ip", n.Gateway, "--v", "1"))
}

func (n *Node) waitReady(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(120 * time.Second)
	for {
		node, err := n.Cluster.Client.CoreV1().Nodes().Get(context.Background(), n.Name, metav1.GetOptions{})
		if err == nil && nodeSchedulable(node) {
			return
		}
		if k := n.procs["kubelet"]; k.ProcessState != nil || time.Now().After(deadline) {
			t.Fatalf("kubetest: node %s not Ready and schedulable after 120 s (%v); kubelet:\n%s\ncontainerd:\n%s",
				n.Name, err, n.Log("kubelet", 6000), n.Log("containerd", 3000))
		}
		time.Sleep(200 * time.Millisecond) // poll with a deadline
	}
}

// Forward listens on the gateway address (pods reach it through the
// bridge) and relays every connection to target() — a host loopback
// address, or a pod's address once known. It returns host:port.
func (n *Node) Forward(t testing.TB, target func() string) string {
	t.Helper()
	l, err := net.Listen("tcp", n.Gateway+":0")
	if err != nil {
		t.Fatalf("kubetest: forward: %v", err)
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		conns  = map[net.Conn]bool{}
		closed bool
	)
	track := func(c net.Conn, on bool) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case on && closed:
			c.Close()
		case on:
			conns[c] = true
		default:
			delete(conns, c)
		}
	}
	// Long-lived relays (a watch, a database pool) are cut when the test ends.
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		closed = true
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				track(c, true)
				defer track(c, false)
				u, err := net.DialTimeout("tcp", target(), 10*time.Second)
				if err != nil {
					return
				}
				track(u, true)
				defer track(u, false)
				defer u.Close()
				done := make(chan struct{})
				go func() { _, _ = io.Copy(u, c); u.(*net.TCPConn).CloseWrite(); close(done) }()
				_, _ = io.Copy(c, u)
				_ = c.(*net.TCPConn).CloseWrite()
				<-done
			}()
		}
	}()
	return l.Addr().String()
}

// APIServerAddr is the kube-apiserver's loopback host:port.
func (n *Node) APIServerAddr() string {
	u, err := url.Parse(n.Cluster.Config.Host)
	if err != nil {
		return ""
	}
	return u.Host
}

// teardown: pods deleted through the API (the kubelet stops their
// containers, tears down their network and unmounts their volumes), the
// kubelet stopped, any task left killed through ctr, containerd and its
// shims stopped, mounts under the node's dir detached, the control plane
// deleted, the dir removed. The bridge goes with claimBridge's cleanup.
func (n *Node) teardown() {
	if n.Cluster != nil && n.procs["kubelet"] != nil {
		ctx := context.Background()
		zero := int64(0)
		nss, _ := n.Cluster.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if nss != nil {
			for _, ns := range nss.Items {
				_ = n.Cluster.Client.CoreV1().Pods(ns.Name).DeleteCollection(ctx,
					metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
			}
		}
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			out, err := n.ctrOut("tasks", "ls", "-q")
			if err == nil && strings.TrimSpace(out) == "" {
				break
			}
			time.Sleep(200 * time.Millisecond) // poll with a deadline
		}
	}
	n.stop("kubelet", 20*time.Second)
	if n.sock != "" {
		if out, err := n.ctrOut("tasks", "ls", "-q"); err == nil {
			for _, id := range strings.Fields(out) {
				_, _ = n.ctrOut("tasks", "kill", "-a", "-s", "SIGKILL", id)
				_, _ = n.ctrOut("tasks", "delete", "-f", id)
			}
		}
	}
	n.stop("containerd", 20*time.Second)
	n.killShims()
	n.unmountAll()
	if n.Cluster != nil {
		n.Cluster.Delete()
	}
	if n.dir != "" {
		_ = os.RemoveAll(n.dir)
	}
}

func (n *Node) stop(name string, grace time.Duration) {
	cmd := n.procs[name]
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
}

// killShims kills the containerd-shim processes of this node's containerd
// (each names its socket in its command line), by PID.
func (n *Node) killShims() {
	if n.sock == "" {
		return
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(b, []byte("containerd-shim")) || !bytes.Contains(b, []byte(n.sock)) {
			continue
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// unmountAll detaches every mount under the node's dir, deepest first.
func (n *Node) unmountAll() {
	if n.dir == "" {
		return
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	var mounts []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], n.dir+"/") {
			mounts = append(mounts, fields[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(mounts)))
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			fmt.Fprintf(os.Stderr, "kubetest: unmount %s: %v\n", m, err)
		}
	}
}

// PodIP waits (bounded) until the pod has an address and returns it.
func (n *Node) PodIP(t testing.TB, ns, name string) string {
	t.Helper()
	deadline := time.Now().Add(120 * time.Second)
	for {
		p, err := n.Cluster.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil && p.Status.PodIP != "" {
			return p.Status.PodIP
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubetest: pod %s/%s has no IP after 120 s: %v %s", ns, name, err, podSummary(p))
		}
		time.Sleep(200 * time.Millisecond) // poll with a deadline
	}
}

// podSummary is a pod's phase and its containers' states, for failures.
func podSummary(p *corev1.Pod) string {
	if p == nil {
		return "<no pod>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s node=%q", p.Status.Phase, p.Spec.NodeName)
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			fmt.Fprintf(&b, " %s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	for _, s := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		fmt.Fprintf(&b, " %s{ready=%v restarts=%d", s.Name, s.Ready, s.RestartCount)
		if w := s.State.Waiting; w != nil {
			fmt.Fprintf(&b, " waiting=%s: %s", w.Reason, w.Message)
		}
		if x := s.State.Terminated; x != nil {
			fmt.Fprintf(&b, " terminated=%s(%d): %s", x.Reason, x.ExitCode, x.Message)
		}
		b.WriteString("}")
	}
	return b.String()
}

// PodSummary is podSummary for callers.
func PodSummary(p *corev1.Pod) string { return podSummary(p) }
