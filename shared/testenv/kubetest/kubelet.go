package kubetest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/svc-dev/svc/shared/wait"
)

// Kubelet plays the kubelet of the fake nodes for one container of the pods
// of one namespace (those matching Selector, when set): for each pod kwok has
// given an IP, it runs the Init containers named (to completion, in order),
// then starts Binary with
// the container's args and environment (values, Secret and field
// references resolved; emptyDir, Secret and projected-Secret volumes
// materialised in a temp dir, and paths under their mount points rewritten
// there; ConfigMap volumes too), listening on the pod IP; it SIGTERMs the
// process when the pod is deleted and SIGKILLs it after the pod's grace
// period, as a kubelet would.
//
// Unlike a kubelet it does not gate the pod's Ready condition (kwok marks
// pods Ready by its own stages), so callers probe the process itself. A pod
// of a project starts only after the previous process of the same project
// (label Group) exited, as a real pod's volumes outlive its containers, and
// a process never starts on a pod IP another process of this test binary
// still listens on (kwok hands a deleted pod's IP to the next pod at once,
// while the old process may still be in its shutdown sequence).
type Kubelet struct {
	Cluster   *Cluster
	Namespace string
	// Selector, when set, is a label selector limiting the pods handled.
	Selector  string
	Container string // the container to run (podagent)
	// Init names init containers run to completion before Container, with
	// the same Binary, environment and volumes (apiserver's migrate).
	Init   []string
	Binary string
	// Group is the label whose value serialises processes (one at a time);
	// empty: no serialisation.
	Group string
	// Hold, when it returns true for a pod, leaves that pod without a process
	// (a pod that never gets ready).
	Hold func(*corev1.Pod) bool
	// Orphan, when it returns true, leaves the process running after its pod
	// is deleted (a lost node: the API forgets the pod, the process lives on).
	Orphan func(*corev1.Pod) bool
	// Waiting, when it returns a state for a pod, runs no process for it
	// and reports Container waiting in that state, as a kubelet does when
	// it cannot pull the image (ErrImagePull, ImagePullBackOff).
	Waiting func(*corev1.Pod) *corev1.ContainerStateWaiting
	// ExtraEnv is appended to every process's environment.
	ExtraEnv []string

	t      testing.TB
	mu     sync.Mutex
	procs  map[types.UID]*Process
	groups map[string]*Process
	events []string
	cancel context.CancelFunc
}

// Process is one container process the fake kubelet runs.
type Process struct {
	Pod      string
	IP       string
	Done     chan struct{} // closed when the process exited
	Err      error
	log      *bytes.Buffer
	logM     sync.Mutex
	cmd      *exec.Cmd
	grace    time.Duration
	orphaned bool
	// stopAsked (under the Kubelet's mu): the pod's deletion was handled.
	stopAsked bool
	// Env is the environment the process started with.
	Env []string
	// stopped: the kubelet stopped it (pod deletion), as opposed to a crash.
	stopped bool
	// term sends the one SIGTERM: the pod's update (deletionTimestamp) and
	// its deletion both ask for a stop, and a second SIGTERM would kill a
	// podagent in the middle of its shutdown sequence (a kubelet sends one).
	term sync.Once
}

// Log is the process's output so far.
func (p *Process) Log() string {
	p.logM.Lock()
	defer p.logM.Unlock()
	return p.log.String()
}

type lockedWriter struct{ p *Process }

func (w lockedWriter) Write(b []byte) (int, error) {
	w.p.logM.Lock()
	defer w.p.logM.Unlock()
	return w.p.log.Write(b)
}

// Run starts watching; processes stop when the test ends.
func (k *Kubelet) Run(t testing.TB) {
	t.Helper()
	k.t = t
	k.procs, k.groups = map[types.UID]*Process{}, map[string]*Process{}
	ctx, cancel := context.WithCancel(context.Background())
	k.cancel = cancel
	factory := informers.NewSharedInformerFactoryWithOptions(k.Cluster.Client, 0, informers.WithNamespace(k.Namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.LabelSelector = k.Selector
		}))
	inf := factory.Core().V1().Pods().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { k.sync(o.(*corev1.Pod), false) },
		UpdateFunc: func(_, o any) { k.sync(o.(*corev1.Pod), false) },
		DeleteFunc: func(o any) {
			if tomb, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = tomb.Obj
			}
			if pod, ok := o.(*corev1.Pod); ok {
				k.sync(pod, true)
			}
		},
	})
	factory.Start(ctx.Done())
	t.Cleanup(func() {
		cancel()
		factory.Shutdown()
		k.mu.Lock()
		procs := make([]*Process, 0, len(k.procs))
		for _, p := range k.procs {
			procs = append(procs, p)
		}
		k.mu.Unlock()
		for _, p := range procs {
			p.stop(5 * time.Second)
		}
	})
}

// Events is what the kubelet did, in order ("start <pod>", "stop <pod>",
// "exit <pod>", "hold <pod>", "orphan <pod>", "crash <pod>",
// "waiting <pod> <reason>", "init <pod> <container>", "error <pod>: …").
func (k *Kubelet) Events() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.events...)
}

// Process returns the process of a pod (nil if none was started).
func (k *Kubelet) Process(podName string) *Process {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, p := range k.procs {
		if p.Pod == podName {
			return p
		}
	}
	return nil
}

func (k *Kubelet) event(format string, a ...any) {
	k.events = append(k.events, fmt.Sprintf(format, a...))
}

func (k *Kubelet) sync(pod *corev1.Pod, deleted bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p, running := k.procs[pod.UID]
	if deleted || pod.DeletionTimestamp != nil {
		if running && p.cmd == nil {
			p.stopAsked = true // deleted before its process started: it never will
		}
		if running && p.cmd != nil && !p.orphaned && !p.stopAsked && !p.stopping() {
			if k.Orphan != nil && k.Orphan(pod) {
				k.event("orphan %s", pod.Name)
				p.orphaned = true // not stopped by the pod, only by the test's end
				// The project's next pod does not wait for it (it is on a lost node).
				if g := pod.Labels[k.Group]; k.Group != "" && k.groups[g] == p {
					delete(k.groups, g)
				}
				return
			}
			k.event("stop %s", pod.Name)
			p.stopAsked = true
			go p.stop(p.grace)
		}
		return
	}
	if running && k.Group != "" && pod.Labels[k.Group] != "" && p.cmd != nil && !p.stopping() {
		// A pod that joined a group while running (a warm pool's spare
		// claimed by a project): the group's next pod waits for it.
		if g := pod.Labels[k.Group]; k.groups[g] == nil || k.groups[g].stopping() {
			k.groups[g] = p
		}
	}
	if running || pod.Status.PodIP == "" {
		return
	}
	if k.Hold != nil && k.Hold(pod) {
		k.procs[pod.UID] = &Process{Pod: pod.Name, Done: make(chan struct{}), log: &bytes.Buffer{}}
		k.event("hold %s", pod.Name)
		return
	}
	if k.Waiting != nil {
		if w := k.Waiting(pod); w != nil {
			k.procs[pod.UID] = &Process{Pod: pod.Name, Done: make(chan struct{}), log: &bytes.Buffer{}}
			go k.reportWaiting(pod.DeepCopy(), *w)
			return
		}
	}
	p = &Process{Pod: pod.Name, IP: pod.Status.PodIP, Done: make(chan struct{}), log: &bytes.Buffer{},
		grace: 30 * time.Second}
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		p.grace = time.Duration(*g) * time.Second
	}
	k.procs[pod.UID] = p
	var prev *Process
	if g := pod.Labels[k.Group]; k.Group != "" && g != "" {
		prev = k.groups[g]
		k.groups[g] = p
	}
	go k.start(pod.DeepCopy(), p, prev)
}

// ips holds, per pod IP, the process of this test binary listening there
// (every Kubelet's), so a pod reusing the IP waits for its exit.
var ips = struct {
	sync.Mutex
	by map[string]*Process
}{by: map[string]*Process{}}

// claimIP waits until no other live process holds ip, then holds it for p.
func claimIP(ip string, p *Process) {
	for {
		ips.Lock()
		cur := ips.by[ip]
		if cur == nil || cur.stopping() {
			ips.by[ip] = p
			ips.Unlock()
			return
		}
		ips.Unlock()
		<-cur.Done
	}
}

func releaseIP(ip string, p *Process) {
	ips.Lock()
	defer ips.Unlock()
	if ips.by[ip] == p {
		delete(ips.by, ip)
	}
}

// Stop sends the process SIGTERM and waits for its exit (SIGKILL after
// grace), as a kubelet stopping the container (an orphan's end, in tests).
func (p *Process) Stop(grace time.Duration) { p.stop(grace) }

// Kill SIGKILLs the process as a crash of its container: the kubelet
// reports the container waiting in CrashLoopBackOff.
func (p *Process) Kill() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
	}
}

func (p *Process) stopping() bool { return wait.Closed(p.Done) }

func (p *Process) stop(grace time.Duration) {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	p.term.Do(func() {
		p.logM.Lock()
		p.stopped = true
		p.logM.Unlock()
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	})
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.Done:
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.Done
	}
}

func (k *Kubelet) start(pod *corev1.Pod, p *Process, prev *Process) {
	if prev != nil && prev.cmd != nil {
		<-prev.Done
	}
	claimIP(p.IP, p)
	defer releaseIP(p.IP, p)
	root, err := os.MkdirTemp("", "kubelet-"+pod.Name+"-")
	if err == nil {
		k.t.Cleanup(func() { _ = os.RemoveAll(root) })
		err = k.runInit(pod, p, root)
	}
	var cmd *exec.Cmd
	if err == nil {
		cmd, err = k.command(pod, k.Container, root)
	}
	if err != nil {
		p.Err = err
		k.mu.Lock()
		k.event("error %s: %v", pod.Name, err)
		k.mu.Unlock()
		close(p.Done)
		return
	}
	cmd.Stdout, cmd.Stderr = lockedWriter{p}, lockedWriter{p}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	k.mu.Lock()
	if p.stopAsked {
		k.event("skip %s", pod.Name)
		k.mu.Unlock()
		close(p.Done)
		return
	}
	if err := cmd.Start(); err != nil {
		p.Err = err
		k.event("error %s: %v", pod.Name, err)
		k.mu.Unlock()
		close(p.Done)
		return
	}
	p.cmd = cmd
	p.Env = cmd.Env
	k.event("start %s", pod.Name)
	k.mu.Unlock()
	p.Err = cmd.Wait()
	releaseIP(p.IP, p)
	k.mu.Lock()
	k.event("exit %s", pod.Name)
	k.mu.Unlock()
	p.logM.Lock()
	crashed := !p.stopped
	p.logM.Unlock()
	if crashed {
		k.reportCrash(pod, p)
	}
	close(p.Done)
}

// reportCrash does what a kubelet does when a container exits on its own:
// the container's status turns to waiting CrashLoopBackOff.
func (k *Kubelet) reportCrash(pod *corev1.Pod, p *Process) {
	if k.setWaiting(pod, corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
		Message: fmt.Sprintf("back-off restarting failed container %s: %v", k.Container, p.Err)}) {
		k.mu.Lock()
		k.event("crash %s", pod.Name)
		k.mu.Unlock()
	}
}

// reportWaiting reports a container that never started (Waiting hook).
func (k *Kubelet) reportWaiting(pod *corev1.Pod, w corev1.ContainerStateWaiting) {
	ok := k.setWaiting(pod, w)
	k.mu.Lock()
	defer k.mu.Unlock()
	if ok {
		k.event("waiting %s %s", pod.Name, w.Reason)
	} else {
		k.event("error %s: could not report %s", pod.Name, w.Reason)
	}
}

// setWaiting writes Container's state as waiting w into the pod's status
// (after kwok made it Running: kwok leaves a pod with an IP alone).
func (k *Kubelet) setWaiting(pod *corev1.Pod, w corev1.ContainerStateWaiting) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cur, err := k.Cluster.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil || cur.UID != pod.UID || cur.DeletionTimestamp != nil {
		return false
	}
	st := corev1.ContainerStatus{Name: k.Container, State: corev1.ContainerState{Waiting: &w}}
	replaced := false
	for _, list := range [][]corev1.ContainerStatus{cur.Status.InitContainerStatuses, cur.Status.ContainerStatuses} {
		for i := range list {
			if list[i].Name == k.Container {
				st.Image, st.ImageID, st.Started = list[i].Image, list[i].ImageID, nil
				list[i].State, list[i].Ready = st.State, false
				replaced = true
			}
		}
	}
	if !replaced {
		cur.Status.InitContainerStatuses = append(cur.Status.InitContainerStatuses, st)
	}
	_, err = k.Cluster.Client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
	return err == nil
}

// runInit runs the Init containers to completion, in order.
func (k *Kubelet) runInit(pod *corev1.Pod, p *Process, root string) error {
	for _, name := range k.Init {
		cmd, err := k.command(pod, name, root)
		if err != nil {
			return err
		}
		cmd.Stdout, cmd.Stderr = lockedWriter{p}, lockedWriter{p}
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("init container %s: %w", name, err)
		}
		k.mu.Lock()
		k.event("init %s %s", pod.Name, name)
		k.mu.Unlock()
	}
	return nil
}

// command builds the container's process: env resolved, volumes
// materialised, the listen address on the pod IP.
func (k *Kubelet) command(pod *corev1.Pod, container, root string) (*exec.Cmd, error) {
	var c *corev1.Container
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Name == container {
				c = &list[i]
			}
		}
	}
	if c == nil {
		return nil, fmt.Errorf("pod %s has no container %q", pod.Name, container)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = v
	}
	mounts := map[string]string{} // mount path → local dir
	for _, m := range c.VolumeMounts {
		v, ok := vols[m.Name]
		if !ok {
			return nil, fmt.Errorf("volume %s not in the pod", m.Name)
		}
		dir := filepath.Join(root, m.Name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		files := map[string][]byte{}
		switch {
		case v.EmptyDir != nil:
		case v.Secret != nil:
			if err := k.secretFiles(ctx, v.Secret.SecretName, v.Secret.Items, files); err != nil {
				return nil, err
			}
		case v.ConfigMap != nil:
			if err := k.configMapFiles(ctx, v.ConfigMap.Name, v.ConfigMap.Items, files); err != nil {
				return nil, err
			}
		case v.Projected != nil:
			for _, src := range v.Projected.Sources {
				var err error
				switch {
				case src.Secret != nil:
					err = k.secretFiles(ctx, src.Secret.Name, src.Secret.Items, files)
				case src.ConfigMap != nil:
					err = k.configMapFiles(ctx, src.ConfigMap.Name, src.ConfigMap.Items, files)
				}
				if err != nil {
					return nil, err
				}
			}
		default:
			return nil, fmt.Errorf("volume %s: only emptyDir, secret, configMap and projected volumes are emulated", m.Name)
		}
		for name, b := range files {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
				return nil, err
			}
		}
		mounts[m.MountPath] = dir
	}
	paths := make([]string, 0, len(mounts))
	for p := range mounts {
		paths = append(paths, p)
	}
	sort.Slice(paths, func(i, j int) bool { return len(paths[i]) > len(paths[j]) })
	rewrite := func(v string) string {
		for _, mp := range paths {
			if v == mp || strings.HasPrefix(v, mp+"/") {
				return mounts[mp] + strings.TrimPrefix(v, mp)
			}
		}
		return v
	}
	env := []string{"PATH=" + os.Getenv("PATH")}
	for _, e := range c.Env {
		v := e.Value
		if f := e.ValueFrom; f != nil {
			switch {
			case f.SecretKeyRef != nil:
				s, err := k.secret(ctx, f.SecretKeyRef.Name)
				if err != nil {
					return nil, err
				}
				v = string(s[f.SecretKeyRef.Key])
			case f.FieldRef != nil:
				switch f.FieldRef.FieldPath {
				case "status.podIP":
					v = pod.Status.PodIP
				case "metadata.name":
					v = pod.Name
				case "metadata.namespace":
					v = pod.Namespace
				}
			default:
				return nil, fmt.Errorf("env %s: unsupported valueFrom", e.Name)
			}
		}
		v = rewrite(v)
		if strings.HasPrefix(v, ":") && strings.HasSuffix(e.Name, "_ADDR") {
			v = pod.Status.PodIP + v
		}
		env = append(env, e.Name+"="+v)
	}
	env = append(env, k.ExtraEnv...)
	cmd := exec.Command(k.Binary, c.Args...)
	cmd.Env = env
	cmd.Dir = root
	return cmd, nil
}

func (k *Kubelet) secretFiles(ctx context.Context, name string, items []corev1.KeyToPath, files map[string][]byte) error {
	data, err := k.secret(ctx, name)
	if err != nil {
		return err
	}
	return keyFiles("secret", name, data, items, files)
}

func (k *Kubelet) configMapFiles(ctx context.Context, name string, items []corev1.KeyToPath, files map[string][]byte) error {
	cm, err := k.Cluster.Client.CoreV1().ConfigMaps(k.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("configmap %s: %w", name, err)
	}
	data := map[string][]byte{}
	for key, v := range cm.Data {
		data[key] = []byte(v)
	}
	for key, b := range cm.BinaryData {
		data[key] = b
	}
	return keyFiles("configmap", name, data, items, files)
}

// keyFiles maps a Secret's or ConfigMap's keys to volume files.
func keyFiles(kind, name string, data map[string][]byte, items []corev1.KeyToPath, files map[string][]byte) error {
	if len(items) == 0 {
		for key, b := range data {
			files[key] = b
		}
		return nil
	}
	for _, it := range items {
		b, ok := data[it.Key]
		if !ok {
			return fmt.Errorf("%s %s has no key %s", kind, name, it.Key)
		}
		files[it.Path] = b
	}
	return nil
}

// secret waits for a Secret (the driver creates the token Secret just after
// the pod, as a kubelet waits for a volume's Secret).
func (k *Kubelet) secret(ctx context.Context, name string) (map[string][]byte, error) {
	for {
		s, err := k.Cluster.Client.CoreV1().Secrets(k.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			return s.Data, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("secret %s: %w", name, err)
		case <-time.After(50 * time.Millisecond): // poll with a deadline
		}
	}
}
