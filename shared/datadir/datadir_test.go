package datadir_test

import (
	"testing"

	"github.com/svc-dev/svc/shared/datadir"
)

// The layout is a contract between the API server and the pods it starts:
// pinned here.
func TestLayout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ got, want string }{
		{datadir.Store("/d"), "/d/store"},
		{datadir.LockFile("/d"), "/d/svc.lock"},
		{datadir.Database("/d"), "/d/svc.db"},
		{datadir.Hydrated("/d"), "/d/hydrated"},
		{datadir.Runtime("/d", "prj_1"), "/d/runtimes/prj_1"},
		{datadir.RuntimeSecret("/d"), "/d/runtime-auth-secret"},
		{datadir.Demo("/d", "api-key"), "/d/demo-api-key"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
