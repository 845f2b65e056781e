package kubernetes

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/svc-dev/svc/apiserver/internal/store"
)

// reapStore is the reaper's database: assignments by project, a failing
// read on demand, and a count of each read.
type reapStore struct {
	Store // the methods the reaper does not call panic

	mu        sync.Mutex
	rows      map[string]store.RuntimeAssignment
	failRead  error
	batches   int // GetRuntimeAssignments calls
	singles   int // GetRuntimeAssignment calls
	advanced  []string
	batchSize []int
}

func (s *reapStore) GetRuntimeAssignment(_ context.Context, id string) (store.RuntimeAssignment, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.singles++
	if a, ok := s.rows[id]; ok {
		return a, nil
	}
	return store.RuntimeAssignment{}, store.ErrNotFound
}

func (s *reapStore) GetRuntimeAssignments(_ context.Context, ids []string) (map[string]store.RuntimeAssignment, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches++
	s.batchSize = append(s.batchSize, len(ids))
	if s.failRead != nil {
		return nil, s.failRead
	}
	out := map[string]store.RuntimeAssignment{}
	for _, id := range ids {
		if a, ok := s.rows[id]; ok {
			out[id] = a
		}
	}
	return out, nil
}

func (s *reapStore) AdvanceRuntime(_ context.Context, id, driver string, from int64) (store.RuntimeAssignment, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanced = append(s.advanced, id)
	a := s.rows[id]
	a.Generation, a.Instance = from+1, ""
	s.rows[id] = a
	return a, nil
}

// Every case of the reaper's pass, from one read of the assignments: a
// replaced generation, another driver, no assignment, a pod its assignment
// does not name, a busy pod, an idle one, a fresh one; and a failed read
// stops nothing.
func TestReapCases(t *testing.T) {
	t.Parallel()
	const ns = "rt"
	now := time.Now()
	old := metav1.NewTime(now.Add(-2 * time.Hour))
	fresh := metav1.NewTime(now.Add(-time.Minute))
	pod := func(name, project string, gen string, created metav1.Time, deleting bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, CreationTimestamp: created,
			Labels:      map[string]string{LabelManagedBy: ManagedBy},
			Annotations: map[string]string{}}}
		if project != "" {
			p.Labels[LabelProject] = project
		}
		if gen != "" {
			p.Annotations[AnnotationGeneration] = gen
		}
		if deleting {
			p.DeletionTimestamp = &fresh
			p.Finalizers = []string{"test/hold"}
		}
		return p
	}
	kube := func(gen int64, instance string) store.RuntimeAssignment {
		return store.RuntimeAssignment{Driver: Name, Generation: gen, Instance: instance}
	}
	cases := []struct {
		name    string
		pod     *corev1.Pod
		row     *store.RuntimeAssignment
		busy    bool
		stopped bool
		advance bool // the idle stop advances the generation first
	}{
		{"replaced generation", pod("p-replaced", "prj_replaced", "2", fresh, false), ptr(kube(3, "")), false, true, false},
		{"another driver", pod("p-paired", "prj_paired", "1", fresh, false),
			&store.RuntimeAssignment{Driver: store.DriverPaired, Instance: "pair_a"}, false, true, false},
		{"no assignment", pod("p-gone", "prj_gone", "1", fresh, false), nil, false, true, false},
		{"not the named pod", pod("p-lost", "prj_lost", "4", fresh, false), ptr(kube(4, "p-winner")), false, true, false},
		{"busy", pod("p-busy", "prj_busy", "1", old, false), ptr(kube(1, "p-busy")), true, false, false},
		{"idle", pod("p-idle", "prj_idle", "1", old, false), ptr(kube(1, "p-idle")), false, true, true},
		{"idle, unnamed", pod("p-idle2", "prj_idle2", "5", old, false), ptr(kube(5, "")), false, true, true},
		{"fresh", pod("p-fresh", "prj_fresh", "1", fresh, false), ptr(kube(1, "p-fresh")), false, false, false},
		{"newer pod than the row", pod("p-ahead", "prj_ahead", "3", fresh, false), ptr(kube(2, "")), false, false, false},
		{"already deleting", pod("p-deleting", "prj_deleting", "1", old, true), nil, false, false, false},
		{"a spare", pod("p-spare", "", "", old, false), nil, false, false, false},
		{"no generation", pod("p-nogen", "prj_nogen", "", old, false), nil, false, false, false},
	}
	for _, failRead := range []bool{false, true} {
		st := &reapStore{rows: map[string]store.RuntimeAssignment{}}
		if failRead {
			st.failRead = errors.New("database down")
		}
		client := fake.NewClientset()
		idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		candidates := 0
		for _, c := range cases {
			if _, err := client.CoreV1().Pods(ns).Create(context.Background(), c.pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := idx.Add(c.pod); err != nil {
				t.Fatal(err)
			}
			if c.row != nil {
				a := *c.row
				a.ProjectID = c.pod.Labels[LabelProject]
				st.rows[a.ProjectID] = a
			}
			if c.pod.DeletionTimestamp == nil && c.pod.Labels[LabelProject] != "" && podGeneration(c.pod) != 0 {
				candidates++
			}
		}
		d := &Driver{o: Options{Client: client, Namespace: ns, Store: st, IdleTimeout: time.Hour},
			log: zap.NewNop(), pods: listerscorev1.NewPodLister(idx),
			lastUsed: map[string]time.Time{}, inFlight: map[string]int{}, marked: map[string]time.Time{}}
		var release []func()
		for _, c := range cases {
			if c.busy {
				release = append(release, d.hold(c.pod))
			}
		}
		d.reap(context.Background(), now)

		if st.batches != 1 || st.singles != 0 || st.batchSize[0] != candidates {
			t.Errorf("failRead=%v: %d batch reads (of %v ids), %d single reads; want 1 of %d, 0",
				failRead, st.batches, st.batchSize, st.singles, candidates)
		}
		var advanced []string
		for _, c := range cases {
			_, err := client.CoreV1().Pods(ns).Get(context.Background(), c.pod.Name, metav1.GetOptions{})
			gone := apierrors.IsNotFound(err)
			if err != nil && !gone {
				t.Fatal(err)
			}
			want := c.stopped && !failRead
			if gone != want {
				t.Errorf("failRead=%v, %s: stopped = %v, want %v", failRead, c.name, gone, want)
			}
			if c.advance && !failRead {
				advanced = append(advanced, c.pod.Labels[LabelProject])
			}
			if c.busy && !failRead {
				d.mu.Lock()
				touched := !d.lastUsed[c.pod.Name].IsZero()
				d.mu.Unlock()
				if !touched {
					t.Errorf("%s: the busy pod was not marked used", c.name)
				}
			}
		}
		slices.Sort(advanced)
		slices.Sort(st.advanced)
		if !slices.Equal(st.advanced, advanced) {
			t.Errorf("failRead=%v: advanced %v, want %v", failRead, st.advanced, advanced)
		}
		for _, r := range release {
			r()
		}
	}
}

func ptr[T any](v T) *T { return &v }
