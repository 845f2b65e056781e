package journal

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
)

// A burst of writes made while one transaction is being written costs one
// more transaction, not one each, and every write is on disk when its call
// returns.
func TestApplyGroupedCommitsABurstTogether(t *testing.T) {
	t.Parallel()
	d, err := Open(filepath.Join(t.TempDir(), "journal.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	table := TableOf[int](d, Handover)
	const burst = 32

	leading, release := make(chan struct{}), make(chan struct{})
	var queued sync.WaitGroup
	var mu sync.Mutex
	var sizes []int
	first := true
	d.group.mu.Lock()
	d.group.beforeCommit = func(n int) {
		mu.Lock()
		sizes = append(sizes, n)
		lead := first
		first = false
		mu.Unlock()
		if lead { // hold the first transaction until the burst waits
			close(leading)
			<-release
		}
	}
	d.group.queued = queued.Done
	d.group.mu.Unlock()

	put := func(i int) error {
		op, err := table.PutOp(fmt.Sprintf("%04d", i), i)
		if err != nil {
			return err
		}
		return d.ApplyGrouped(op)
	}
	errs := make(chan error, burst+1)
	go func() { errs <- put(0) }()
	<-leading
	queued.Add(burst)
	for i := 1; i <= burst; i++ {
		go func() { errs <- put(i) }()
	}
	queued.Wait()
	close(release)
	for range burst + 1 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	got := append([]int(nil), sizes...)
	mu.Unlock()
	if len(got) != 2 || got[0] != 1 || got[1] != burst {
		t.Fatalf("transactions of %v calls, want [1 %d]", got, burst)
	}
	items, _, err := table.Load(nil)
	if err != nil || len(items) != burst+1 {
		t.Fatalf("on disk: %d entries, %v; want %d", len(items), err, burst+1)
	}
}

// A call whose ops fail does not fail the calls it shared a transaction
// with.
func TestApplyGroupedIsolatesAFailingCall(t *testing.T) {
	t.Parallel()
	d, err := Open(filepath.Join(t.TempDir(), "journal.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	good, _ := TableOf[int](d, Handover).PutOp("a", 1)
	bad := Op{db: d, kind: Handover, key: "", val: []byte("1")} // bbolt refuses an empty key
	calls := []*groupCall{{ops: []Op{good}}, {ops: []Op{bad}}}
	d.commitGroup(calls)
	if calls[0].err != nil || calls[1].err == nil {
		t.Fatalf("errors = %v, %v; want nil, an error", calls[0].err, calls[1].err)
	}
	if items, _, err := TableOf[int](d, Handover).Load(nil); err != nil || len(items) != 1 {
		t.Fatalf("on disk: %+v %v", items, err)
	}
}
