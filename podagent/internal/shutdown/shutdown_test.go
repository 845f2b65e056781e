package shutdown

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"
)

type fake struct {
	calls       []string
	healthy     bool
	flushErr    error
	snapshotErr error
}

func (f *fake) steps() Steps {
	return Steps{
		Drain: func(ctx context.Context) error { f.calls = append(f.calls, "drain"); return nil },
		GitFlush: func(ctx context.Context, d time.Duration) error {
			f.calls = append(f.calls, fmt.Sprintf("gitFlush(%s)", d))
			return f.flushErr
		},
		Healthy: func() bool { f.calls = append(f.calls, "healthy?"); return f.healthy },
		Fenced:  func() bool { return false },
		UploadHEADSnapshot: func(ctx context.Context) error {
			f.calls = append(f.calls, "uploadHEADSnapshot")
			return f.snapshotErr
		},
		S3Flush: func(ctx context.Context, force bool) error {
			dl, _ := ctx.Deadline()
			f.calls = append(f.calls, fmt.Sprintf("s3Flush(force=%v, limit<=%s)", force, time.Until(dl).Round(time.Second)))
			return nil
		},
		ForceProjectArchive: true,
	}
}

func TestSequenceOrder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		f    fake
		want []string
	}{
		{"healthy", fake{healthy: true}, []string{"drain", "gitFlush(5s)", "healthy?", "uploadHEADSnapshot"}},
		{"degraded", fake{healthy: false, flushErr: errors.New("down")}, []string{"drain", "gitFlush(5s)", "healthy?", "s3Flush(force=true, limit<=10s)"}},
		{"healthy but snapshot fails: the cold-start tarball is still written", fake{healthy: true, snapshotErr: errors.New("x")},
			[]string{"drain", "gitFlush(5s)", "healthy?", "uploadHEADSnapshot", "s3Flush(force=true, limit<=10s)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Run(context.Background(), tt.f.steps())
			if !reflect.DeepEqual(tt.f.calls, tt.want) {
				t.Fatalf("calls\n got %q\nwant %q", tt.f.calls, tt.want)
			}
			if !res.ColdStartWritten {
				t.Fatal("cold-start tarball not written")
			}
		})
	}
}

func TestFencedWritesNothing(t *testing.T) {
	t.Parallel()
	f := &fake{healthy: true}
	s := f.steps()
	s.Fenced = func() bool { return true }
	Run(context.Background(), s)
	if !reflect.DeepEqual(f.calls, []string{"drain"}) {
		t.Fatalf("calls = %q", f.calls)
	}
}
