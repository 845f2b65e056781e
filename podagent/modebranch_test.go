package podagent_test

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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

// The turn engine and the cold start do not know the modes or the mode's
// stores: gitsync imports neither the durable .git (durable) nor the S3
// layers (s3sync) nor the mode table, and coldstart takes its source from
// the strategy (FromGit, FromS3) without the mode table. Each mode's writes
// are its strategy's (docs/sync-modes.md §12).
func TestEngineAndColdStartImportNoModeStore(t *testing.T) {
	t.Parallel()
	const mod = "github.com/svc-dev/svc/"
	for dir, banned := range map[string][]string{
		"internal/gitsync":   {mod + "podagent/internal/durable", mod + "podagent/internal/s3sync", mod + "shared/syncmode"},
		"internal/coldstart": {mod + "shared/syncmode"},
	} {
		fset := token.NewFileSet()
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no Go files (%v)", dir, err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range af.Imports {
				if p, _ := strconv.Unquote(imp.Path.Value); slices.Contains(banned, p) {
					t.Errorf("%s imports %s: a mode's writes and its source belong to its strategy (podagent/internal/syncstrategy)", f, p)
				}
			}
		}
	}
}
