package pod

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/archive/archivetest"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/testenv"
)

// Healthy shutdown: the final flush commits the last edits, and
// project-src.tar.gz is HEAD's content (no node_modules, no ignored files).
func TestShutdownHealthy(t *testing.T) {
	t.Parallel()
	store := storeKinds()[0].open(t)
	api, ws := newProject(t)
	writeFile(t, ws, ".gitignore", ".env\nnode_modules/\n")
	writeFile(t, ws, "index.js", "v0")
	p := startPod(t, api.options(ws, store))
	writeFile(t, ws, "index.js", "v1 (uncommitted at SIGTERM)")
	writeFile(t, ws, ".env", "ignored")
	writeFile(t, ws, "node_modules/dep/index.js", "dep")
	res := p.Shutdown(context.Background())
	if res.GitFlushErr != nil || !res.HealthyAtFlush || !res.ColdStartWritten {
		t.Fatalf("result = %+v", res)
	}
	src := archivetest.StoredEntries(t, store, objstore.SourceKey("p1"))
	if src["index.js"] != "v1 (uncommitted at SIGTERM)" {
		t.Fatalf("project-src.tar.gz = %q", sortedKeys(src))
	}
	for name := range src {
		if name == ".env" || name == "node_modules/dep/index.js" {
			t.Fatalf("HEAD snapshot contains %s", name)
		}
	}
	if recs := api.recorded(); len(recs) != 1 || recs[0].Message != "shutdown flush" {
		t.Fatalf("records = %+v", recs)
	}
	if _, err := p.Turn(context.Background(), "after shutdown"); err == nil {
		t.Fatal("turn accepted after shutdown")
	}
}

// Degraded shutdown: the final git flush fails (storage for .git is down),
// so the S3 flush with forceProjectArchive tars the live work tree.
func TestShutdownDegraded(t *testing.T) {
	t.Parallel()
	env := testenv.MinIO(t)
	proxy := testenv.NewFaultProxy(t, env.Endpoint)
	durableStore := openS3(t, proxy.Addr(), env)
	layerStore := openS3(t, env.Endpoint, env)
	api, ws := newProject(t)
	writeFile(t, ws, ".gitignore", ".env\n")
	writeFile(t, ws, "index.js", "v0")
	p := startPod(t, Options{Config: testConfig("p1", ws, api.srv.URL), Store: durableStore, LayerStore: layerStore,
		PersistAttempts: 1, PersistTimeout: time.Second})
	proxy.SetDown(true)
	for i := 1; i <= 3; i++ {
		writeFile(t, ws, "index.js", fmt.Sprint("v", i))
		if _, err := p.Turn(context.Background(), "t"); err != nil {
			t.Fatal(err)
		}
	}
	if !p.Machine.Degraded() {
		t.Fatal("not degraded")
	}
	writeFile(t, ws, ".env", "live-only")
	res := p.Shutdown(context.Background())
	if res.GitFlushErr == nil || res.HealthyAtFlush || res.S3FlushErr != nil || !res.ColdStartWritten {
		t.Fatalf("result = %+v", res)
	}
	src := archivetest.StoredEntries(t, layerStore, objstore.SourceKey("p1"))
	if src[".env"] != "live-only" || src["index.js"] != "v3" {
		t.Fatalf("project-src.tar.gz is not the live tree: %q", sortedKeys(src))
	}
}
