package degrade

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/svc-dev/svc/shared/syncmode"
)

// recorder records every side effect in order, as Tailscale's state_test
// records backend notifications, including the log lines.
type recorder struct{ calls []string }

func (r *recorder) callbacks() Callbacks {
	return Callbacks{
		OnDegrade:                 func() { r.calls = append(r.calls, "onDegrade") },
		OnRecovered:               func() { r.calls = append(r.calls, "onRecovered") },
		SetSuppressProjectArchive: func(v bool) { r.calls = append(r.calls, fmt.Sprintf("setSuppressProjectArchive(%v)", v)) },
	}
}

// logHook appends each log message to the same call list.
func (r *recorder) logger() *zap.Logger {
	core, _ := observer.New(zapcore.DebugLevel)
	return zap.New(core, zap.Hooks(func(e zapcore.Entry) error {
		r.calls = append(r.calls, "log: "+e.Message)
		return nil
	}))
}

func TestTransitionsInExactOrder(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	m := New(syncmode.GitOnly, 3, rec.callbacks(), rec.logger())
	boom := errors.New("PUT repo.git.tar.gz: connection refused")

	type step struct {
		op        string // "fail" or "ok"
		wantState State
		wantCount int
		wantCalls []string // side effects of this step only
	}
	steps := []step{
		{"fail", Healthy, 1, nil},
		{"ok", Healthy, 0, nil}, // a success before the threshold resets the counter
		{"fail", Healthy, 1, nil},
		{"fail", Healthy, 2, nil},
		{"fail", Degraded, 3, []string{"onDegrade", "setSuppressProjectArchive(false)", "log: cloud-sync degraded (mode=git_only)"}},
		{"fail", Degraded, 4, nil}, // git keeps retrying; no second degrade
		{"fail", Degraded, 5, nil},
		{"ok", Healthy, 0, []string{"onRecovered", "setSuppressProjectArchive(true)", "log: cloud-sync recovered (mode=git_only)"}},
		{"ok", Healthy, 0, nil},
		{"fail", Healthy, 1, nil},
		{"fail", Healthy, 2, nil},
		{"fail", Degraded, 3, []string{"onDegrade", "setSuppressProjectArchive(false)", "log: cloud-sync degraded (mode=git_only)"}},
		{"ok", Healthy, 0, []string{"onRecovered", "setSuppressProjectArchive(true)", "log: cloud-sync recovered (mode=git_only)"}},
	}
	for i, s := range steps {
		rec.calls = nil
		var got State
		if s.op == "fail" {
			got = m.Failure(boom)
		} else {
			got = m.Success()
		}
		if got != s.wantState || m.State() != s.wantState {
			t.Fatalf("step %d (%s): state = %v, want %v", i, s.op, got, s.wantState)
		}
		if c := m.ConsecutiveFailures(); c != s.wantCount {
			t.Fatalf("step %d (%s): failures = %d, want %d", i, s.op, c, s.wantCount)
		}
		if !reflect.DeepEqual(rec.calls, s.wantCalls) {
			t.Fatalf("step %d (%s): side effects\n got %q\nwant %q", i, s.op, rec.calls, s.wantCalls)
		}
	}
}

func TestThresholdConfigurableAndModeInLogLine(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.InfoLevel)
	m := New(syncmode.DualShadow, 1, Callbacks{}, zap.New(core))
	if m.Failure(errors.New("x")) != Degraded {
		t.Fatal("threshold 1 should degrade on the first failure")
	}
	m.Success()
	var msgs []string
	for _, e := range logs.All() {
		msgs = append(msgs, e.Message)
	}
	if strings.Join(msgs, "|") != "cloud-sync degraded (mode=dual_shadow)|cloud-sync recovered (mode=dual_shadow)" {
		t.Fatalf("logs = %q", msgs)
	}
	if New(syncmode.GitOnly, 0, Callbacks{}, nil).threshold != DefaultAfterFailures {
		t.Fatal("default threshold")
	}
}
