package kubetest

// The control plane's ports. Left to itself, kwokctl takes the first free
// ports counting down from 32767, checked by a listen that it closes at
// once: two test binaries creating clusters at the same moment pick the same
// ports, one cluster's etcd or kube-apiserver fails to bind, and a component
// of the other can end up talking to the wrong kube-apiserver (a scheduler
// that never schedules; a deployment left Pending). The harness picks the
// ports instead, at random below the kernel's ephemeral range and each
// checked free, while holding a machine-wide lock that it releases only once
// kwokctl create has returned, its components started.

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"syscall"
)

// The range ports are picked from: above the well-known services, below the
// ephemeral ports (32768–60999) the kernel gives outgoing connections.
const portLow, portHigh = 12000, 32000

// clusterPorts are the ports one kwokctl cluster binds (on 127.0.0.1) with
// the binary runtime; the names are the KwokctlConfiguration options.
type clusterPorts struct {
	EtcdPeer, Etcd, KubeApiserver, KwokController, KubeControllerManager, KubeScheduler int
}

// options is the ports as kwokctl configuration options (YAML, indented
// under options:).
func (p clusterPorts) options() string {
	return fmt.Sprintf("  etcdPeerPort: %d\n  etcdPort: %d\n  kubeApiserverPort: %d\n  kwokControllerPort: %d\n"+
		"  kubeControllerManagerPort: %d\n  kubeSchedulerPort: %d\n",
		p.EtcdPeer, p.Etcd, p.KubeApiserver, p.KwokController, p.KubeControllerManager, p.KubeScheduler)
}

// pickPorts picks distinct free ports at random.
func pickPorts() (clusterPorts, error) {
	seen := map[int]bool{}
	pick := func() (int, error) {
		for range 200 {
			p := portLow + rand.IntN(portHigh-portLow)
			if !seen[p] && portFree(p) {
				seen[p] = true
				return p, nil
			}
		}
		return 0, fmt.Errorf("kubetest: no free port in %d–%d after 200 tries", portLow, portHigh)
	}
	var p clusterPorts
	for _, dst := range []*int{&p.EtcdPeer, &p.Etcd, &p.KubeApiserver, &p.KwokController, &p.KubeControllerManager, &p.KubeScheduler} {
		var err error
		if *dst, err = pick(); err != nil {
			return clusterPorts{}, err
		}
	}
	return p, nil
}

// portFree: nothing listens on the port, on 127.0.0.1 or on any address.
func portFree(p int) bool {
	for _, addr := range []string{fmt.Sprintf("127.0.0.1:%d", p), fmt.Sprintf(":%d", p)} {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return false
		}
		_ = l.Close()
	}
	return true
}

// lockClusterStarts takes the machine-wide lock on creating a control plane
// (a flock, released when the returned func runs or the process dies).
func lockClusterStarts() (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "svc-kubetest-start.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("kubetest: locking cluster starts: %w", err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}
