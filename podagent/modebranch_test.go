package podagent_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// modeBranchAllowed are the folders that may tell the sync modes apart:
// the strategies themselves (docs/sync-modes.md §12).
// The mode table is shared/syncmode, outside this module.
var modeBranchAllowed = map[string]string{
	"internal/syncstrategy": "the one implementation per mode",
}

// No `if mode` outside the strategies: a comparison (==, !=) or a switch
// case that names a sync mode — syncmode.S3, syncmode.DualShadow,
// syncmode.GitOnly or their spellings as strings — fails this test unless
// its folder is in modeBranchAllowed. A new mode-dependent behaviour goes
// into the strategies, where every mode must answer it.
func TestNoModeBranchOutsideStrategies(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	var found []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if _, ok := modeBranchAllowed[filepath.ToSlash(path)]; ok || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, pos := range modeBranches(f) {
			found = append(found, fset.Position(pos).String())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Errorf("%s: a branch on the sync mode outside the strategies (podagent/internal/syncstrategy)", f)
	}
}

// A file with a branch on every kind of mention is caught; a file that only
// passes the mode on or asks the mode table is not.
func TestModeBranchesFindsEveryForm(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, src string
		want      int
	}{
		{"eq", `if m == syncmode.GitOnly {}`, 1},
		{"neq reversed", `if syncmode.S3 != m {}`, 1},
		{"renamed import", `if m == sm.DualShadow {}`, 1},
		{"string", `if string(m) == "dual_shadow" {}`, 1},
		{"switch", "switch m {\ncase syncmode.S3, syncmode.DualShadow:\n}", 1},
		{"switch string", "switch m {\ncase \"git_only\":\n}", 1},
		{"passed on", `f(syncmode.GitOnly); _ = m.KeepsSourceArchive()`, 0},
		{"other string", `if mode == "async" {}`, 0},
	} {
		imp := `"github.com/svc-dev/svc/shared/syncmode"`
		if tc.name == "renamed import" {
			imp = `sm "github.com/svc-dev/svc/shared/syncmode"`
		}
		src := "package x\nimport " + imp + "\nfunc g(m syncmode.Mode, mode string) {\n" + tc.src + "\n}\n"
		src = strings.Replace(src, "m syncmode.Mode", "m string", 1)
		f, err := parser.ParseFile(token.NewFileSet(), "x.go", src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := len(modeBranches(f)); got != tc.want {
			t.Errorf("%s: %d branches found, want %d", tc.name, got, tc.want)
		}
	}
}

// modeBranches returns the positions of comparisons and switch cases on a
// sync mode in f.
func modeBranches(f *ast.File) []token.Pos {
	pkg := ""
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "github.com/svc-dev/svc/shared/syncmode" {
			pkg = "syncmode"
			if imp.Name != nil {
				pkg = imp.Name.Name
			}
		}
	}
	isMode := func(e ast.Expr) bool {
		switch x := e.(type) {
		case *ast.SelectorExpr:
			id, ok := x.X.(*ast.Ident)
			return ok && pkg != "" && id.Name == pkg && (x.Sel.Name == "S3" || x.Sel.Name == "DualShadow" || x.Sel.Name == "GitOnly")
		case *ast.BasicLit:
			s, _ := strconv.Unquote(x.Value)
			return x.Kind == token.STRING && (s == "s3" || s == "dual_shadow" || s == "git_only")
		}
		return false
	}
	var out []token.Pos
	ast.Inspect(f, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.BinaryExpr:
			if (x.Op == token.EQL || x.Op == token.NEQ) && (isMode(x.X) || isMode(x.Y)) {
				out = append(out, x.Pos())
			}
		case *ast.CaseClause:
			for _, e := range x.List {
				if isMode(e) {
					out = append(out, x.Pos())
					break
				}
			}
		}
		return true
	})
	return out
}
