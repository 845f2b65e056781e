package podagent_test

import (
	"testing"

	"github.com/svc-dev/svc/shared/testenv/layers"
)

// The pod agent's packages form layers (issue 22 point 6): nothing imports
// a binary, and no folder imports another that imports it back.
func TestLayers(t *testing.T) {
	t.Parallel()
	layers.Check(t, ".", layers.Rules{Forbidden: []layers.Edge{
		{From: "", To: "cmd", Except: []string{"cmd"}, Why: "nothing imports a binary"},
	}})
}
