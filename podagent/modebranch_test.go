package podagent_test

import (
	"testing"

	"github.com/svc-dev/svc/shared/testenv/modebranch"
)

// modeBranchAllowed are the folders that may tell the sync modes apart:
// the strategies themselves (docs/sync-modes.md §12). The mode table is
// shared/syncmode, outside this module.
var modeBranchAllowed = map[string]string{
	"internal/syncstrategy": "the one implementation per mode",
}

// No `if mode` outside the strategies: a comparison (==, !=) or a switch
// case that names a sync mode (shared/testenv/modebranch, whose own test
// covers every form) fails this test unless its folder is in
// modeBranchAllowed. A new mode-dependent behaviour goes into the
// strategies, where every mode must answer it. The API has the twin,
// apiserver's TestNoModeBranchOutsideTheModeTable.
func TestNoModeBranchOutsideStrategies(t *testing.T) {
	t.Parallel()
	modebranch.Check(t, ".", modeBranchAllowed, "outside the strategies, podagent/internal/syncstrategy")
}
