package shutdown

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"
)

type fake struct {
	mu          sync.Mutex // a step cut off by its limit runs on beside the next
	calls       []string
	healthy     bool
	flushErr    error
	snapshotErr error
	// slowSnapshot: the snapshot runs until its budget ends.
	slowSnapshot bool
	// untracked: no durability state (s3); noSnapshot: no HEAD snapshot
	// step (s3, dual_shadow).
	untracked, noSnapshot bool
	force                 bool
}

func (f *fake) call(c string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
}

const (
	testSnapshotLimit = 200 * time.Millisecond
	testS3Limit       = 2 * time.Second
)

func (f *fake) steps() Steps {
	s := Steps{
		Drain: func(ctx context.Context) error { f.call("drain"); return nil },
		GitFlush: func(ctx context.Context, d time.Duration) error {
			f.call(fmt.Sprintf("gitFlush(%s)", d))
			return f.flushErr
		},
		Healthy: func() bool { f.call("healthy?"); return f.healthy },
		Fenced:  func() bool { return false },
		UploadHEADSnapshot: func(ctx context.Context) error {
			f.call("uploadHEADSnapshot")
			if f.slowSnapshot {
				<-ctx.Done()
				return ctx.Err()
			}
			return f.snapshotErr
		},
		S3Flush: func(ctx context.Context, force bool) error {
			dl, _ := ctx.Deadline()
			// Its own limit: not what a slow snapshot left of a shared one.
			full := time.Until(dl) > testS3Limit-testSnapshotLimit/2
			f.call(fmt.Sprintf("s3Flush(force=%v, fullLimit=%v)", force, full))
			return nil
		},
		ForceProjectArchive: f.force,
		SnapshotTimeout:     testSnapshotLimit,
		S3FlushTimeout:      testS3Limit,
	}
	if f.untracked {
		s.Healthy = nil
	}
	if f.noSnapshot {
		s.UploadHEADSnapshot = nil
	}
	return s
}

func TestSequence(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		f          fake
		want       []string
		durability string
		path       string
	}{
		{"git_only healthy", fake{healthy: true, force: true},
			[]string{"drain", "gitFlush(5s)", "healthy?", "uploadHEADSnapshot"}, Healthy, PathHEADSnapshot},
		{"git_only degraded", fake{flushErr: errors.New("down"), force: true},
			[]string{"drain", "gitFlush(5s)", "s3Flush(force=true, fullLimit=true)"}, Degraded, PathS3Flush},
		// Below the degrade threshold the machine still says healthy, but
		// the failed final flush leaves the pod degraded: no HEAD snapshot
		// of a commit the durable .git may lack.
		{"git_only final flush fails, machine still healthy", fake{healthy: true, flushErr: errors.New("down"), force: true},
			[]string{"drain", "gitFlush(5s)", "s3Flush(force=true, fullLimit=true)"}, Degraded, PathS3Flush},
		{"git_only snapshot fails: the cold-start tarball is still written", fake{healthy: true, snapshotErr: errors.New("x"), force: true},
			[]string{"drain", "gitFlush(5s)", "healthy?", "uploadHEADSnapshot", "s3Flush(force=true, fullLimit=true)"}, Healthy, PathS3Flush},
		{"git_only slow snapshot: the S3 flush keeps its whole limit", fake{healthy: true, slowSnapshot: true, force: true},
			[]string{"drain", "gitFlush(5s)", "healthy?", "uploadHEADSnapshot", "s3Flush(force=true, fullLimit=true)"}, Healthy, PathS3Flush},
		{"dual_shadow healthy", fake{healthy: true, noSnapshot: true},
			[]string{"drain", "gitFlush(5s)", "healthy?", "s3Flush(force=false, fullLimit=true)"}, Healthy, PathS3Flush},
		{"dual_shadow degraded", fake{flushErr: errors.New("push refused"), noSnapshot: true},
			[]string{"drain", "gitFlush(5s)", "s3Flush(force=false, fullLimit=true)"}, Degraded, PathS3Flush},
		{"s3", fake{untracked: true, noSnapshot: true},
			[]string{"drain", "gitFlush(5s)", "s3Flush(force=false, fullLimit=true)"}, Untracked, PathS3Flush},
	}
	for i := range tests {
		tt := &tests[i]
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := Run(context.Background(), tt.f.steps())
			if !reflect.DeepEqual(tt.f.calls, tt.want) {
				t.Fatalf("calls\n got %q\nwant %q", tt.f.calls, tt.want)
			}
			if !res.ColdStartWritten || res.Durability != tt.durability || res.Path != tt.path ||
				res.HealthyAtFlush != (tt.durability == Healthy) {
				t.Fatalf("result %+v, want durability %s, path %s", res, tt.durability, tt.path)
			}
		})
	}
}

func TestFencedWritesNothing(t *testing.T) {
	t.Parallel()
	f := &fake{healthy: true}
	s := f.steps()
	s.Fenced = func() bool { return true }
	res := Run(context.Background(), s)
	if !reflect.DeepEqual(f.calls, []string{"drain"}) || res.Durability != Fenced || res.Path != PathNone {
		t.Fatalf("calls = %q, result %+v", f.calls, res)
	}
}

// The flushes' budgets fit the grace period: the drain ends Reserve before
// the deadline, which is Margin before the runtime's SIGKILL.
func TestBudgetsFitTheGrace(t *testing.T) {
	t.Parallel()
	if got := time.Duration(Reserve); got != 20*time.Second {
		t.Fatalf("Reserve = %s, want 5 s git + 5 s snapshot + 10 s S3", got)
	}
	now := time.Unix(0, 0)
	for _, grace := range []time.Duration{25 * time.Second, 55 * time.Second} { // local driver, chart
		dl := Deadline(now, grace)
		if got := DrainDeadline(dl).Sub(now); got != grace-Margin-Reserve || got <= 0 {
			t.Errorf("grace %s: drain %s", grace, got)
		}
	}
}
