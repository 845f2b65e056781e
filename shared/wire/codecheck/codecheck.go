// Package codecheck reads a module's Go source and reports every place that
// steps outside the one error vocabulary (shared/wire.Codes, docs/errors.md):
// an error code not declared in the table, a status or type chosen inline,
// a status passed to wire.Relayed that is a constant (Relayed is for
// answers received), or a plain-text http.Error. Each module's tests run
// it over the module (TestErrorVocabulary), so adding an inline status or
// an undeclared code fails the build's tests.
package codecheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/svc-dev/svc/shared/wire"
)

// Constructors are the functions whose first argument is an error code:
// wire.Coded and the few local helpers that pass their code on to it.
var Constructors = map[string]bool{"Coded": true, "badRequest": true, "invalid": true, "hostError": true}

var codeLike = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// Check walks root (skipping _test.go files, testdata, vendor, hidden
// folders and the test harness's doubles of other services: testenv,
// fake*) and the folders in skip (slash paths relative to root, each a
// documented exception of its module's test), and returns one line per
// violation, "file:line: what", sorted.
func Check(root string, skip ...string) ([]string, error) {
	var out []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			n := d.Name()
			if rel, err := filepath.Rel(root, path); err == nil {
				for _, s := range skip {
					if filepath.ToSlash(rel) == s {
						return filepath.SkipDir
					}
				}
			}
			if path != root && (n == "testdata" || n == "vendor" || n == "testenv" || strings.HasPrefix(n, "fake") ||
				strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_")) {
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
		out = append(out, checkFile(fset, f)...)
		return nil
	})
	sort.Strings(out)
	return out, err
}

func checkFile(fset *token.FileSet, f *ast.File) []string {
	var out []string
	report := func(n ast.Node, format string, args ...any) {
		out = append(out, fmt.Sprintf("%s: %s", fset.Position(n.Pos()), fmt.Sprintf(format, args...)))
	}
	checkCode := func(n ast.Expr, where string) {
		if s, ok := stringLit(n); ok {
			if _, declared := wire.Codes[s]; !declared {
				report(n, "error code %q (%s) is not declared in wire.Codes", s, where)
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CompositeLit:
			name := typeName(n.Type)
			if name != "Error" && name != "ErrorDetail" {
				return true
			}
			for _, el := range n.Elts {
				kv, ok := el.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				switch key, _ := kv.Key.(*ast.Ident); {
				case key == nil:
				case key.Name == "Code":
					checkCode(kv.Value, name+" literal")
				case (key.Name == "Status" || key.Name == "Type") && name == "Error" && constant(kv.Value):
					report(kv, "%s chosen inline in an Error literal: use wire.Coded with a declared code", key.Name)
				}
			}
		case *ast.CallExpr:
			fn := callName(n.Fun)
			switch {
			case Constructors[fn] && len(n.Args) > 0:
				checkCode(n.Args[0], fn)
			case fn == "Relayed" && len(n.Args) > 0 && constant(n.Args[0]):
				report(n, "wire.Relayed with a constant status: an error this binary raises is wire.Coded")
			case fn == "http.Error":
				report(n, "plain-text http.Error: answer the envelope (wire.Error.Write)")
			default:
				// A 4xx/5xx status constant and a code-like string in one
				// call: a status chosen beside its code (a one-word string
				// only in a call named like an error constructor, so an
				// HTML page's template name is not taken for a code).
				var status, code ast.Expr
				for _, a := range n.Args {
					if errorStatus(a) {
						status = a
					}
					if s, ok := stringLit(a); ok && codeLike.MatchString(s) && status != nil && (strings.Contains(s, "_") || errorish(fn)) {
						code = a
					}
				}
				if code != nil {
					report(n, "status %s chosen beside code %s: use wire.Coded with a declared code",
						exprString(status), exprString(code))
				}
			}
		case *ast.ValueSpec:
			for i, id := range n.Names {
				if strings.HasPrefix(id.Name, "Code") && i < len(n.Values) {
					checkCode(n.Values[i], "constant "+id.Name)
				}
			}
		}
		return true
	})
	return out
}

func errorish(fn string) bool {
	l := strings.ToLower(fn)
	return strings.Contains(l, "err") || strings.HasSuffix(fn, "New")
}

func stringLit(e ast.Expr) (string, bool) {
	bl, ok := e.(*ast.BasicLit)
	if !ok || bl.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(bl.Value)
	return s, err == nil
}

func typeName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.Ident:
		return t.Name
	case *ast.SelectorExpr:
		return t.Sel.Name
	}
	return ""
}

func callName(e ast.Expr) string {
	switch f := e.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		if x, ok := f.X.(*ast.Ident); ok && x.Name == "http" {
			return "http." + f.Sel.Name
		}
		return f.Sel.Name
	}
	return ""
}

// constant reports a literal or a named constant (http.StatusX, TypeX,
// wire.TypeX); a field read (s.Type) is not one.
func constant(e ast.Expr) bool {
	switch v := e.(type) {
	case *ast.BasicLit:
		return true
	case *ast.Ident:
		return strings.HasPrefix(v.Name, "Type")
	case *ast.SelectorExpr:
		x, ok := v.X.(*ast.Ident)
		return ok && (x.Name == "http" && strings.HasPrefix(v.Sel.Name, "Status") || x.Name == "wire" && strings.HasPrefix(v.Sel.Name, "Type"))
	}
	return false
}

// errorStatus reports a 4xx/5xx status: http.StatusX or an integer literal.
func errorStatus(e ast.Expr) bool {
	switch v := e.(type) {
	case *ast.BasicLit:
		n, err := strconv.Atoi(v.Value)
		return v.Kind == token.INT && err == nil && n >= 400 && n < 600
	case *ast.SelectorExpr:
		x, ok := v.X.(*ast.Ident)
		if !ok || x.Name != "http" || !strings.HasPrefix(v.Sel.Name, "Status") {
			return false
		}
		for _, ok := range []string{"StatusOK", "StatusCreated", "StatusAccepted", "StatusNoContent", "StatusFound",
			"StatusMovedPermanently", "StatusSeeOther", "StatusNotModified", "StatusTemporaryRedirect",
			"StatusPermanentRedirect", "StatusPartialContent", "StatusSwitchingProtocols", "StatusContinue", "StatusMultipleChoices"} {
			if v.Sel.Name == ok {
				return false
			}
		}
		return true
	}
	return false
}

func exprString(e ast.Expr) string {
	switch v := e.(type) {
	case *ast.BasicLit:
		return v.Value
	case *ast.SelectorExpr:
		return typeName(v.X) + "." + v.Sel.Name
	}
	return "?"
}
