package main

import (
	"context"
	"errors"
	"os"
	"strings"

	k8s "k8s.io/client-go/kubernetes"

	kubedriver "github.com/svc-dev/svc/apiserver/internal/runtimes/kubernetes"
)

// inClusterNamespace is where a pod's own namespace is mounted.
const inClusterNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// kubernetesDriver builds the kubernetes runtime driver from the
// configuration; anything missing is a start-up error.
func (a *app) kubernetesDriver(ctx context.Context) (*kubedriver.Driver, error) {
	c := a.cfg
	if c.RuntimePodTemplate == "" {
		return nil, errors.New("config: SVC_RUNTIME_DRIVER=kubernetes needs SVC_RUNTIME_POD_TEMPLATE_FILE (the chart's runtime pod template)")
	}
	tmpl, err := kubedriver.LoadPodTemplate(c.RuntimePodTemplate)
	if err != nil {
		return nil, err
	}
	ns := c.RuntimeNamespace
	if ns == "" {
		b, err := os.ReadFile(inClusterNamespace)
		if err != nil {
			return nil, errors.New("config: SVC_RUNTIME_NAMESPACE is not set and this is not a pod")
		}
		ns = strings.TrimSpace(string(b))
	}
	rc, err := kubedriver.RESTConfig(c.Kubeconfig)
	if err != nil {
		return nil, err
	}
	rc.UserAgent = "svc-apiserver"
	// client-go's default (5/s, burst 10) throttles a fleet's informer
	// resyncs and a rush of creations; the pod creations have their own
	// gate below (docs/scale.md).
	rc.QPS, rc.Burst = float32(c.KubeClientQPS), c.KubeClientBurst
	client, err := k8s.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	idle := c.RuntimeIdleTimeout
	if idle == 0 {
		idle = -1 // 0 means never
	}
	return kubedriver.New(ctx, kubedriver.Options{Client: client, Namespace: ns, Template: tmpl, Store: a.store,
		RuntimeSecret: []byte(c.RuntimeAuthSecret), APIURL: c.RuntimePodAPIURL, Env: podOnlyEnv(os.Environ()),
		StartTimeout: c.RuntimeStartTimeout, IdleTimeout: idle, Log: a.log,
		CreateQPS: float64(c.PodCreateQPS), CreateBurst: c.PodCreateBurst, CreateQueue: c.PodCreateQueue,
		PoolSize: c.WarmPoolSize})
}

// podOnlyEnv passes SVC_POD_<NAME>=v of the API server's environment to
// runtime pods as SVC_<NAME>=v (as the local driver does).
func podOnlyEnv(environ []string) []string {
	var out []string
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "SVC_POD_") && len(k) > len("SVC_POD_") {
			out = append(out, "SVC_"+strings.TrimPrefix(k, "SVC_POD_")+"="+v)
		}
	}
	return out
}
