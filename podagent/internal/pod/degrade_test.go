package pod

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/podagent/internal/checkpoints"
	"github.com/svc-dev/svc/podagent/internal/degrade"
	"github.com/svc-dev/svc/podagent/internal/journal"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/testenv"
)

// Storage goes away under the durable path: after 3 failed turns the pod is
// degraded (log line, layer 2 written on later turns); when it comes back
// the next success recovers (log line, layer 2 suppressed again), and every
// commit is persisted and recorded.
func TestDegradeAndRecoverWithRealMinIO(t *testing.T) {
	t.Parallel()
	env := testenv.MinIO(t)
	proxy := testenv.NewFaultProxy(t, env.Endpoint)
	durableStore := openS3(t, proxy.Addr(), env) // .git goes through the proxy
	layerStore := openS3(t, env.Endpoint, env)   // layer 2 goes straight to MinIO
	api := newFakeAPI(t, "p1")
	log, logs := observed(t)

	var mu sync.Mutex
	var events []string
	record := func(s string) { mu.Lock(); events = append(events, s); mu.Unlock() }
	ws := t.TempDir()
	writeFile(t, ws, "app.js", "v0")
	p := startPod(t, Options{
		Config: testConfig("p1", ws, api.srv.URL), Store: durableStore, LayerStore: layerStore, Log: log,
		OnDegrade: func() { record("onDegrade") }, OnRecovered: func() { record("onRecovered") },
		PersistAttempts: 1, PersistTimeout: 1500 * time.Millisecond,
	})
	ctx := context.Background()
	srcKey := objstore.SourceKey("p1")
	turn := func(i int) string {
		t.Helper()
		writeFile(t, ws, "app.js", fmt.Sprintf("v%d", i))
		sha, err := p.Turn(ctx, fmt.Sprintf("turn %d", i))
		if err != nil || sha == "" {
			t.Fatalf("turn %d: %q %v", i, sha, err)
		}
		return sha
	}

	turn(1)
	proxy.SetDown(true)
	for i := 2; i <= 4; i++ {
		turn(i)
		wantDegraded := i == 4 // the third consecutive failure
		if got := p.Machine.Degraded(); got != wantDegraded {
			t.Fatalf("after failed turn %d: degraded=%v", i, got)
		}
		_, err := layerStore.Head(ctx, srcKey)
		if wantDegraded != (err == nil) {
			t.Fatalf("after failed turn %d: layer 2 exists=%v (err %v)", i, err == nil, err)
		}
	}
	if got := messages(logs, "cloud-sync"); !reflect.DeepEqual(got, []string{"cloud-sync degraded (mode=git_only)"}) {
		t.Fatalf("log lines = %q", got)
	}
	if p.S3.SuppressProjectArchive() {
		t.Fatal("layer 2 still suppressed while degraded")
	}
	// Degraded: layer 2 keeps being written per turn; commits are not recorded yet.
	before, _ := layerStore.Head(ctx, srcKey)
	turn(5)
	after, _ := layerStore.Head(ctx, srcKey)
	if before.ETag == after.ETag {
		t.Fatal("layer 2 not rewritten on a degraded turn")
	}
	if n := len(api.recorded()); n != 1 {
		t.Fatalf("%d records while degraded, want 1 (unpersisted commits are never recorded)", n)
	}
	if p.Recorder.Len() != 4 {
		t.Fatalf("pending = %d, want 4", p.Recorder.Len())
	}

	proxy.SetDown(false)
	last := turn(6)
	if p.Machine.Degraded() || !p.S3.SuppressProjectArchive() || p.Machine.ConsecutiveFailures() != 0 {
		t.Fatalf("not recovered: degraded=%v suppress=%v failures=%d", p.Machine.Degraded(), p.S3.SuppressProjectArchive(), p.Machine.ConsecutiveFailures())
	}
	if got := messages(logs, "cloud-sync"); !reflect.DeepEqual(got, []string{"cloud-sync degraded (mode=git_only)", "cloud-sync recovered (mode=git_only)"}) {
		t.Fatalf("log lines = %q", got)
	}
	mu.Lock()
	if !reflect.DeepEqual(events, []string{"onDegrade", "onRecovered"}) {
		t.Fatalf("callbacks = %q", events)
	}
	mu.Unlock()
	// Suppressed again: the recovering turn did not rewrite layer 2.
	again, _ := layerStore.Head(ctx, srcKey)
	turn(7)
	again2, _ := layerStore.Head(ctx, srcKey)
	if again.ETag != after.ETag || again2.ETag != after.ETag {
		t.Fatal("layer 2 written while healthy again")
	}
	recs := api.recorded()
	if len(recs) != 7 || recs[5].CommitSHA != last {
		t.Fatalf("%d records after recovery, want 7", len(recs))
	}
	if p.Metrics.Registry == nil {
		t.Fatal("metrics")
	}
}

// A failed checkpoint POST is not a durability failure; the pod remembers
// the commit (on disk) and records it later, also after a restart.
func TestRecordFailuresAreRetriedAndSurviveRestart(t *testing.T) {
	t.Parallel()
	store, _ := storeKinds()[0].open(t), 0
	api := newFakeAPI(t, "p1")
	api.down.Store(true)
	ws := t.TempDir()
	writeFile(t, ws, "x", "0")
	p := startPod(t, api.options(ws, store))
	for i := 1; i <= 4; i++ {
		writeFile(t, ws, "x", fmt.Sprint(i))
		if _, err := p.Turn(context.Background(), fmt.Sprintf("turn %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if p.Machine.State() != degrade.Healthy || p.Machine.ConsecutiveFailures() != 0 {
		t.Fatal("record failures counted as durability failures")
	}
	if p.Recorder.Len() != 4 || len(api.recorded()) != 0 {
		t.Fatalf("pending=%d recorded=%d", p.Recorder.Len(), len(api.recorded()))
	}
	p.Close()
	// On disk: the pod's journal file holds the four commits.
	db, err := journal.OpenState(filepath.Join(ws, ".git", "svc-agent"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	onDisk, err := checkpoints.Journaled(db)
	_ = db.Close()
	if err != nil || len(onDisk) != 4 || onDisk[3].Record.CommitSHA == "" {
		t.Fatalf("journal: %+v %v", onDisk, err)
	}
	api.down.Store(false)
	p2 := startPod(t, api.options(ws, store))
	if got := len(api.recorded()); got != 4 || p2.Recorder.Len() != 0 {
		t.Fatalf("after restart: recorded=%d pending=%d", got, p2.Recorder.Len())
	}
}

// A record the API failed is the hand-over queue's to retry: once the
// commit is persisted the mode's writer owes nothing (the engine's retry
// loop, set here to wait an hour, never posts records), and the queue's
// drain loop records the commit when the API is back.
func TestBackgroundLoopRecordsLater(t *testing.T) {
	t.Parallel()
	store := storeKinds()[0].open(t)
	api := newFakeAPI(t, "p1")
	api.down.Store(true)
	ws := t.TempDir()
	cfg := testConfig("p1", ws, api.srv.URL)
	cfg.PersistRetryMin, cfg.PersistRetryMax = time.Hour, time.Hour
	p := startPod(t, Options{Config: cfg, Store: store})
	writeFile(t, ws, "x", "1")
	if _, err := p.Turn(context.Background(), "turn"); err != nil {
		t.Fatal(err)
	}
	if p.Recorder.Len() != 1 || len(api.recorded()) != 0 {
		t.Fatalf("pending=%d recorded=%d", p.Recorder.Len(), len(api.recorded()))
	}
	if p.Writer.Owed() {
		t.Fatal("the writer owes work for a persisted commit's record; the hand-over queue owns its retry")
	}
	api.down.Store(false)
	deadline := time.Now().Add(20 * time.Second)
	for p.Recorder.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the hand-over queue never recorded the commit")
		}
		time.Sleep(20 * time.Millisecond) // observe the loop's effect: poll with a deadline
	}
	if len(api.recorded()) != 1 {
		t.Fatal("not recorded")
	}
}

// A persist failure below the degrade threshold is retried in the
// background: the committed turn becomes durable and recorded without
// waiting for the next turn, and the machine never degrades.
func TestPersistRetriedInTheBackgroundBelowTheThreshold(t *testing.T) {
	env := testenv.MinIO(t)
	proxy := testenv.NewFaultProxy(t, env.Endpoint)
	durableStore := openS3(t, proxy.Addr(), env)
	api, ws := newProject(t)
	writeFile(t, ws, "app.js", "v0")
	cfg := testConfig("p1", ws, api.srv.URL)
	cfg.PersistRetryMin, cfg.PersistRetryMax = 20*time.Millisecond, 100*time.Millisecond
	p := startPod(t, Options{Config: cfg, Store: durableStore, LayerStore: openS3(t, env.Endpoint, env),
		PersistAttempts: 1, PersistTimeout: time.Second})
	ctx := context.Background()
	proxy.SetDown(true)
	writeFile(t, ws, "app.js", "v1")
	sha, err := p.Turn(ctx, "turn 1")
	if err != nil || sha == "" {
		t.Fatalf("turn: %q %v", sha, err)
	}
	if p.Machine.ConsecutiveFailures() == 0 || p.Machine.Degraded() {
		t.Fatalf("after one failed persist: failures=%d degraded=%v", p.Machine.ConsecutiveFailures(), p.Machine.Degraded())
	}
	proxy.SetDown(false)
	deadline := time.Now().Add(30 * time.Second)
	for {
		recorded := false
		for _, r := range api.recorded() {
			recorded = recorded || r.CommitSHA == sha
		}
		if recorded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the turn was not persisted and recorded in the background (failures=%d)", p.Machine.ConsecutiveFailures())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if p.Machine.Degraded() {
		t.Fatal("degraded although the retry succeeded below the threshold")
	}
	if got := gitIn(t, ws, "rev-parse", "HEAD"); got != sha {
		t.Fatalf("HEAD %s, want %s (no further turn)", got, sha)
	}
}
