// Package layers checks a module's import graph in a test
// (packages form layers, no import runs from a lower floor back up to a
// higher one, and no two folders import each other). It reads the graph
// with `go list`, production imports only (a _test.go file may reach up).
//
//	func TestLayers(t *testing.T) {
//		layers.Check(t, ".", layers.Rules{Forbidden: []layers.Edge{{From: "internal", To: "internal/server"}}})
//	}
package layers

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// Edge is a forbidden import: a package under From (a path relative to the
// module, matching itself and its subfolders) must not import a package
// under To, unless the importer is under one of Except.
type Edge struct {
	From, To string
	Except   []string
	// Why is shown when the edge is found.
	Why string
}

// Rules are a module's layering rules.
type Rules struct {
	Forbidden []Edge
}

// Check fails t for every forbidden edge and every cycle between folders
// of the module in dir (a folder is internal/<name> or, outside internal,
// the top-level directory: internal/hydrate/hydratetest is in
// internal/hydrate).
func Check(t testing.TB, dir string, r Rules) {
	t.Helper()
	graph, err := load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range Violations(graph, r) {
		t.Error(v)
	}
}

// Graph maps a package (relative to its module) to its imports inside
// the module.
type Graph map[string][]string

// Violations are the forbidden edges and folder cycles of g, sorted.
func Violations(g Graph, r Rules) []string {
	var out []string
	for from, imps := range g {
		for _, to := range imps {
			for _, e := range r.Forbidden {
				if under(from, e.From) && under(to, e.To) && !anyUnder(from, e.Except) {
					out = append(out, fmt.Sprintf("forbidden import %s -> %s (%s)", from, to, e.Why))
				}
			}
		}
	}
	for _, c := range folderCycles(g) {
		out = append(out, "folders import each other: "+strings.Join(c, ", "))
	}
	sort.Strings(out)
	return out
}

func under(p, prefix string) bool {
	return prefix == "" || p == prefix || strings.HasPrefix(p, prefix+"/")
}

func anyUnder(p string, prefixes []string) bool {
	for _, x := range prefixes {
		if under(p, x) {
			return true
		}
	}
	return false
}

// Folder is the folder of a package path relative to its module.
func Folder(p string) string {
	parts := strings.Split(p, "/")
	if parts[0] == "internal" && len(parts) > 1 {
		return parts[0] + "/" + parts[1]
	}
	if parts[0] == "cmd" && len(parts) > 1 {
		return parts[0] + "/" + parts[1]
	}
	return parts[0]
}

// folderCycles are the strongly connected components of more than one
// folder (Tarjan), each sorted.
func folderCycles(g Graph) [][]string {
	adj := map[string]map[string]bool{}
	for from, imps := range g {
		f := Folder(from)
		if adj[f] == nil {
			adj[f] = map[string]bool{}
		}
		for _, to := range imps {
			if t := Folder(to); t != f {
				adj[f][t] = true
			}
		}
	}
	nodes := make([]string, 0, len(adj))
	for n := range adj {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	index, low, onStack := map[string]int{}, map[string]int{}, map[string]bool{}
	var stack []string
	var out [][]string
	var visit func(n string)
	visit = func(n string) {
		index[n], low[n] = len(index), len(index)
		stack = append(stack, n)
		onStack[n] = true
		for m := range adj[n] {
			if _, seen := index[m]; !seen {
				visit(m)
				low[n] = min(low[n], low[m])
			} else if onStack[m] {
				low[n] = min(low[n], index[m])
			}
		}
		if low[n] == index[n] {
			var comp []string
			for {
				m := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[m] = false
				comp = append(comp, m)
				if m == n {
					break
				}
			}
			if len(comp) > 1 {
				sort.Strings(comp)
				out = append(out, comp)
			}
		}
	}
	for _, n := range nodes {
		if _, seen := index[n]; !seen {
			visit(n)
		}
	}
	return out
}

// load lists the packages of the module in dir with their production
// imports inside the module.
func load(dir string) (Graph, error) {
	cmd := exec.Command("go", "list", "-e", "-f", "{{.Module.Path}} {{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("layers: go list: %v\n%s", err, stderr.Bytes())
	}
	g := Graph{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		mod, pkg := f[0], f[1]
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, mod), "/")
		if rel == "" {
			rel = "."
		}
		g[rel] = nil
		for _, imp := range f[2:] {
			if under(imp, mod) && imp != mod {
				g[rel] = append(g[rel], strings.TrimPrefix(imp, mod+"/"))
			}
		}
	}
	return g, sc.Err()
}
