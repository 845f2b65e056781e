package layers_test

import (
	"reflect"
	"testing"

	"github.com/svc-dev/svc/shared/testenv/layers"
)

// Violations finds a forbidden edge (not when the importer is excepted or
// inside the forbidden subtree itself) and a cycle between two folders,
// and nothing in a graph that only runs down.
func TestViolations(t *testing.T) {
	t.Parallel()
	rules := layers.Rules{Forbidden: []layers.Edge{{From: "internal", To: "internal/server", Except: []string{"internal/tools", "internal/server"}, Why: "top"}}}
	for _, tc := range []struct {
		name string
		g    layers.Graph
		want []string
	}{
		{name: "downward only", g: layers.Graph{"internal/server": {"internal/store"}, "internal/server/servertest": {"internal/server"},
			"internal/tools": {"internal/server"}, "internal/store": nil}},
		{name: "upward edge", g: layers.Graph{"internal/console": {"internal/server/servertest"}, "internal/server/servertest": nil},
			want: []string{"forbidden import internal/console -> internal/server/servertest (top)"}},
		{name: "folder cycle through subfolders", g: layers.Graph{"settings": {"objstore"}, "objstore/fs": {"settings"}, "objstore": nil},
			want: []string{"folders import each other: objstore, settings"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := layers.Violations(tc.g, rules); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Violations = %q, want %q", got, tc.want)
			}
		})
	}
}
