package modebranch_test

import (
	"go/parser"
	"go/token"
	"strings"
	"testing"

	"github.com/svc-dev/svc/shared/testenv/modebranch"
)

// A file with a branch on every kind of mention is caught; a file that only
// passes the mode on, asks the mode table, or compares "s3" with something
// that is not a mode (a storage backend) is not.
func TestFindCatchesEveryForm(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, src string
		want      int
	}{
		{"eq", `if m == syncmode.GitOnly {}`, 1},
		{"neq reversed", `if syncmode.S3 != m {}`, 1},
		{"renamed import", `if m == sm.DualShadow {}`, 1},
		{"string", `if string(m) == "dual_shadow" {}`, 1},
		{"s3 string against a mode", `if p.CloudSyncMode == "s3" {}`, 1},
		{"switch", "switch m {\ncase syncmode.S3, syncmode.DualShadow:\n}", 1},
		{"switch string", "switch m {\ncase \"git_only\":\n}", 1},
		{"switch s3 on a mode", "switch mode {\ncase \"s3\":\n}", 1},
		{"passed on", `f(syncmode.GitOnly); _ = m.KeepsSourceArchive()`, 0},
		{"other string", `if mode == "async" {}`, 0},
		{"s3 storage backend", `if storage == "s3" {}`, 0},
		{"s3 read source", "switch src {\ncase \"s3\":\n}", 0},
	} {
		imp := `"github.com/svc-dev/svc/shared/syncmode"`
		if tc.name == "renamed import" {
			imp = `sm "github.com/svc-dev/svc/shared/syncmode"`
		}
		src := "package x\nimport " + imp + "\nfunc g(m string, mode string, storage, src string, p struct{ CloudSyncMode string }) {\n" + tc.src + "\n}\n"
		src = strings.TrimSpace(src)
		f, err := parser.ParseFile(token.NewFileSet(), "x.go", src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := len(modebranch.Find(f)); got != tc.want {
			t.Errorf("%s: %d branches found, want %d", tc.name, got, tc.want)
		}
	}
}
