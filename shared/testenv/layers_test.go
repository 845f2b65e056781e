package testenv_test

import (
	"testing"

	"github.com/svc-dev/svc/shared/testenv/layers"
)

// The harness module's floors: the command on top; the
// control-plane harness (kubetest) over the PostgreSQL and MinIO harness
// (this package); the small helpers at the bottom, importing none of the
// harness, so a test that needs only one of them does not build the rest.
func TestLayers(t *testing.T) {
	t.Parallel()
	forbidden := []layers.Edge{
		{From: "", To: "cmd", Except: []string{"cmd"}, Why: "nothing imports the command"},
		{From: "", To: "kubetest", Except: []string{"kubetest", "cmd"},
			Why: "only the command and the Kubernetes tests pull in the control plane and client-go"},
	}
	for _, leaf := range []string{"fakeupstream", "layers", "tabletest", "testfile", "testhttp"} {
		for _, heavy := range []string{"kubetest", "cmd"} {
			forbidden = append(forbidden, layers.Edge{From: leaf, To: heavy, Why: "the small helpers stay leaves"})
		}
	}
	layers.Check(t, ".", layers.Rules{Forbidden: forbidden})
}
