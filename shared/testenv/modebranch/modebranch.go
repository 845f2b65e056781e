// Package modebranch finds branches on the sync mode in Go source (spec
// 3.1; docs/sync-modes.md §12): a comparison (==, !=) or a switch case that
// names a mode — syncmode.S3, syncmode.DualShadow, syncmode.GitOnly, the
// spellings "dual_shadow" and "git_only", or "s3" compared with something
// named like a mode. Each module's TestNoModeBranchOutside… runs Check over
// its folders: what depends on the mode is a strategy (the pod) or a trait
// of the mode table (shared/syncmode), never an `if mode`.
package modebranch

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

// Check walks root and fails t for every mode branch in a non-test Go file
// outside the folders of allowed (folder relative to root → why).
func Check(t *testing.T, root string, allowed map[string]string, hint string) {
	t.Helper()
	fset := token.NewFileSet()
	var found []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if _, ok := allowed[filepath.ToSlash(rel)]; ok || d.Name() == "testdata" {
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
		for _, pos := range Find(f) {
			found = append(found, fset.Position(pos).String())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Errorf("%s: a branch on the sync mode (%s)", f, hint)
	}
}

// Find returns the positions of comparisons and switch cases on a sync
// mode in f.
func Find(f *ast.File) []token.Pos {
	pkg := ""
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "github.com/svc-dev/svc/shared/syncmode" {
			pkg = "syncmode"
			if imp.Name != nil {
				pkg = imp.Name.Name
			}
		}
	}
	// isMode reports whether e names a mode; other is what it is compared
	// with ("s3" is also a storage backend and a read source: it counts
	// only against something named like a mode).
	isMode := func(e, other ast.Expr) bool {
		switch x := e.(type) {
		case *ast.SelectorExpr:
			id, ok := x.X.(*ast.Ident)
			return ok && pkg != "" && id.Name == pkg && (x.Sel.Name == "S3" || x.Sel.Name == "DualShadow" || x.Sel.Name == "GitOnly")
		case *ast.BasicLit:
			s, _ := strconv.Unquote(x.Value)
			if x.Kind != token.STRING {
				return false
			}
			return s == "dual_shadow" || s == "git_only" || (s == "s3" && namesMode(other))
		}
		return false
	}
	var out []token.Pos
	ast.Inspect(f, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.BinaryExpr:
			if (x.Op == token.EQL || x.Op == token.NEQ) && (isMode(x.X, x.Y) || isMode(x.Y, x.X)) {
				out = append(out, x.Pos())
			}
		case *ast.SwitchStmt:
			for _, st := range x.Body.List {
				cc, ok := st.(*ast.CaseClause)
				if !ok {
					continue
				}
				for _, e := range cc.List {
					if isMode(e, x.Tag) {
						out = append(out, cc.Pos())
						break
					}
				}
			}
		}
		return true
	})
	return out
}

// namesMode reports whether e mentions an identifier named like a mode
// (mode, m, CloudSyncMode, SyncMode…), or is absent (a tagless switch).
func namesMode(e ast.Expr) bool {
	if e == nil {
		return false
	}
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok {
			l := strings.ToLower(id.Name)
			found = found || strings.Contains(l, "mode") || id.Name == "m"
		}
		return !found
	})
	return found
}
