package apiserver_test

import (
	"testing"

	"github.com/svc-dev/svc/shared/testenv/modebranch"
)

// modeBranchAllowed are the API's folders that may tell the sync modes
// apart: none. What the API does per mode is a trait of the mode table
// (shared/syncmode: AcceptsPodPush, GitCheckpoints, KeepsSourceArchive,
// CohortGuided).
var modeBranchAllowed = map[string]string{
	"e2e": "the end-to-end tests run every mode",
}

// No `if mode` in the API: a comparison or a switch case on a sync mode
// fails this test (the twin of the pod's TestNoModeBranchOutsideStrategies).
// A new mode-dependent behaviour is a new column of the mode table, which
// every mode must fill in.
func TestNoModeBranchOutsideTheModeTable(t *testing.T) {
	t.Parallel()
	modebranch.Check(t, ".", modeBranchAllowed, "ask the mode table in shared/syncmode instead")
}
