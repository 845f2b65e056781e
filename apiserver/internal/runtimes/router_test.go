package runtimes_test

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"sync"
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/runtimes"
	"github.com/svc-dev/svc/apiserver/internal/store"
)

// fakeStore keeps assignments in memory and records pins.
type fakeStore struct {
	mu   sync.Mutex
	rows map[string]store.RuntimeAssignment
	pins int
}

func (s *fakeStore) GetRuntimeAssignment(_ context.Context, id string) (store.RuntimeAssignment, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.rows[id]
	if !ok {
		return a, store.ErrNotFound
	}
	return a, nil
}

func (s *fakeStore) PinRuntime(_ context.Context, a store.RuntimeAssignment) (store.RuntimeAssignment, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rows[a.ProjectID] = a
	s.pins++
	return a, nil
}

// fakeDriver records calls in one shared log.
type fakeDriver struct {
	name    string
	log     *[]string
	mu      *sync.Mutex
	running bool
	err     error
	stopped chan struct{}
}

func (d *fakeDriver) record(s string) {
	d.mu.Lock()
	*d.log = append(*d.log, d.name+"."+s)
	d.mu.Unlock()
}
func (d *fakeDriver) Name() string { return d.name }
func (d *fakeDriver) Ensure(_ context.Context, p store.Project) (runtimes.Endpoint, error) {
	d.record("ensure")
	if d.err != nil {
		return runtimes.Endpoint{}, d.err
	}
	return runtimes.Endpoint{URL: &url.URL{Scheme: "http", Host: d.name}, Token: "t"}, nil
}
func (d *fakeDriver) Stop(context.Context, string) error {
	d.record("stop")
	close(d.stopped)
	return nil
}
func (d *fakeDriver) Status(context.Context, string) (runtimes.Status, error) {
	st := runtimes.StateStopped
	if d.running {
		st = runtimes.StateRunning
	}
	return runtimes.Status{Driver: d.name, State: st}, nil
}

func TestRouterPinsOneRuntime(t *testing.T) {
	t.Parallel()
	var log []string
	var mu sync.Mutex
	local := &fakeDriver{name: "local", log: &log, mu: &mu, stopped: make(chan struct{})}
	paired := &fakeDriver{name: "paired", log: &log, mu: &mu, err: runtimes.ErrOffline, stopped: make(chan struct{})}
	st := &fakeStore{rows: map[string]store.RuntimeAssignment{}}
	r := &runtimes.Router{Store: st, Default: local, Paired: paired, Instance: "api_1"}
	ctx := context.Background()
	p := store.Project{ID: "prj_1", CloudSyncMode: "git_only"}

	// Unpinned: the default driver, and the assignment is recorded once.
	for i := 0; i < 2; i++ {
		if ep, err := r.Ensure(ctx, p); err != nil || ep.URL.Host != "local" {
			t.Fatalf("ensure: %v %v", ep, err)
		}
	}
	if a := st.rows["prj_1"]; st.pins != 1 || a.Driver != "local" || a.Endpoint != "http://local" || a.Instance != "api_1" || a.CloudSyncMode != "git_only" {
		t.Fatalf("assignment %+v after %d pins", a, st.pins)
	}

	// Pinned to a paired machine that is offline: instance offline, and the
	// local runtime still running from before is stopped.
	local.running = true
	st.rows["prj_1"] = store.RuntimeAssignment{ProjectID: "prj_1", Driver: store.DriverPaired, Instance: "pair_1"}
	if _, err := r.Ensure(ctx, p); !errors.Is(err, runtimes.ErrOffline) {
		t.Fatalf("paired offline: %v", err)
	}
	<-local.stopped
	want := []string{"local.ensure", "local.ensure", "local.stop", "paired.ensure"}
	mu.Lock()
	got := slices.Clone(log)
	mu.Unlock()
	slices.Sort(got[2:]) // the stop runs in the background
	if !slices.Equal(got, want) {
		t.Fatalf("calls %q, want %q", got, want)
	}
	if st.pins != 1 {
		t.Fatal("the router re-pinned a paired project")
	}
}

// pinnedDriver records the assignment the router hands it.
type pinnedDriver struct {
	fakeDriver
	got []store.RuntimeAssignment
}

func (d *pinnedDriver) EnsurePinned(_ context.Context, _ store.Project, a store.RuntimeAssignment) (runtimes.Endpoint, error) {
	d.got = append(d.got, a)
	return runtimes.Endpoint{URL: &url.URL{Scheme: "http", Host: "holder"}}, nil
}

func TestRouterHandsThePairedDriverItsAssignment(t *testing.T) {
	t.Parallel()
	var log []string
	var mu sync.Mutex
	local := &fakeDriver{name: "local", log: &log, mu: &mu, stopped: make(chan struct{})}
	paired := &pinnedDriver{fakeDriver: fakeDriver{name: "paired", log: &log, mu: &mu, stopped: make(chan struct{})}}
	a := store.RuntimeAssignment{ProjectID: "prj_1", Driver: store.DriverPaired, Instance: "pair_1", Endpoint: "http://10.0.0.7:8080"}
	st := &fakeStore{rows: map[string]store.RuntimeAssignment{"prj_1": a}}
	r := &runtimes.Router{Store: st, Default: local, Paired: paired, Instance: "api_1"}
	ep, err := r.Ensure(context.Background(), store.Project{ID: "prj_1"})
	if err != nil || ep.URL.Host != "holder" {
		t.Fatalf("ensure: %v %v", ep, err)
	}
	if len(paired.got) != 1 || paired.got[0] != a {
		t.Fatalf("paired driver got %+v, want %+v", paired.got, a)
	}
	if len(log) != 0 || st.pins != 0 {
		t.Fatalf("calls %q, pins %d: the router went around the pinned driver", log, st.pins)
	}
}
