package apiserver_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/svc-dev/svc/shared/testenv/layers"
)

// The API server's packages form floors (docs/design.md
// §2): the binary, then the route table (server) and the admin CLI, then
// the handler packages, then the domain packages, then the store. No
// import runs back up, and no folder imports another that imports it back.
func TestLayers(t *testing.T) {
	t.Parallel()
	layers.Check(t, ".", layers.Rules{Forbidden: append([]layers.Edge{
		{From: "", To: "cmd", Except: []string{"cmd"}, Why: "nothing imports the binary"},
		{From: "internal", To: "internal/server", Except: []string{"internal/server"},
			Why: "the route table is the top floor; only its own test helper (servertest) imports it"},
		{From: "internal", To: "internal/admin", Except: []string{"internal/admin"},
			Why: "the admin CLI is a top floor; what the console shares with it lives below (apikey.Issue)"},
		{From: "internal/store", To: "internal", Except: []string{"internal/store"}, Why: "the store is the bottom floor"},
	}, domainBelowHandlers()...)})
}

// The floors of internal/: the handler packages serve HTTP; the domain
// packages below them do not.
var (
	handlers = []string{"agentapi", "agentproxy", "checkpointreads", "console", "gateway", "gitserver", "pairing",
		"publish", "webhookapi"}
	domain = []string{"apikey", "catalog", "hydrate", "janitor", "lfsgc", "metering", "outbox", "parity", "runtimes",
		"storage", "tracing", "upstream", "webhookchannel", "webhooklog"}
)

// HTTP only at the edge: no domain package imports the HTTP framework
// (echo) or the HTTP middleware (httpmw); they take a context and values,
// and the handler packages speak HTTP for them.
func TestDomainFloorSpeaksNoHTTP(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./internal/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const internal = "github.com/svc-dev/svc/apiserver/internal/"
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], internal)
		floor, _, _ := strings.Cut(pkg, "/")
		if !slices.Contains(domain, floor) {
			continue
		}
		checked++
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, "github.com/labstack/echo") || imp == internal+"httpmw" {
				t.Errorf("%s imports %s: HTTP belongs to the handler floor", pkg, imp)
			}
		}
	}
	if checked < len(domain) {
		t.Fatalf("checked %d domain packages, want at least %d", checked, len(domain))
	}
}

// domainBelowHandlers forbids every domain package to import a handler
// package.
func domainBelowHandlers() []layers.Edge {
	var out []layers.Edge
	for _, d := range domain {
		for _, h := range handlers {
			out = append(out, layers.Edge{From: "internal/" + d, To: "internal/" + h,
				Why: "domain packages sit below the HTTP handlers that use them"})
		}
	}
	return out
}
