package shared_test

import (
	"testing"

	"github.com/svc-dev/svc/shared/testenv/layers"
)

// The shared module's packages form layers: no folder
// imports another that imports it back, settings sits above objstore,
// objstore above wire, and
// no production package imports the test harness.
func TestLayers(t *testing.T) {
	t.Parallel()
	layers.Check(t, ".", layers.Rules{Forbidden: []layers.Edge{
		{From: "objstore", To: "settings", Why: "settings declares the storage options over objstore, so objstore sits below it"},
		{From: "wire", To: "objstore", Why: "the object store's presigned-URL server answers the one error envelope, so wire sits below objstore"},
		{From: "", To: "testenv", Why: "production packages never import the test harness (its own module, shared/testenv)"},
	}})
}
