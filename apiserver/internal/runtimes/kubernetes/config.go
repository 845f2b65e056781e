package kubernetes

import (
	"fmt"
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RESTConfig is the in-cluster config, or the kubeconfig named by kubeconfig
// (SVC_KUBECONFIG) or else $KUBECONFIG when set, so an API server outside the
// cluster (tests, operators) drives it too.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		kubeconfig = os.Getenv("KUBECONFIG")
	}
	if kubeconfig != "" {
		c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubernetes runtime: kubeconfig %s: %w", kubeconfig, err)
		}
		return c, nil
	}
	c, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes runtime: not in a cluster and no SVC_KUBECONFIG/KUBECONFIG: %w", err)
	}
	return c, nil
}
