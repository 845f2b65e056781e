package turn_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/svc-dev/svc/podagent/internal/turn"
)

// holdSlot holds s as an agent turn until the returned func is called.
func holdSlot(t *testing.T, s *turn.Slot) (release func()) {
	t.Helper()
	held, done := make(chan struct{}), make(chan struct{})
	ended := make(chan error, 1)
	go func() {
		ended <- s.Hold(context.Background(), turn.KindAgent, func(context.Context) error {
			close(held)
			<-done
			return nil
		})
	}()
	<-held
	return func() {
		close(done)
		if err := <-ended; err != nil {
			t.Errorf("holding turn: %v", err)
		}
	}
}

// Every kind waits for the running turn; a kind other than an agent turn
// or the shutdown flush waits at most half of its deadline, then is refused
// with *InProgressError naming the running turn.
func TestSlotWaitsOrRefuses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		kind     turn.Kind
		deadline time.Duration // 0: none
		release  bool          // the running turn ends while the other waits
		want     string        // "ran", "in_progress", "deadline"
	}{
		{"rollback after the turn", turn.KindRollback, 0, true, "ran"},
		{"flush after the turn", turn.KindFlush, time.Minute, true, "ran"},
		{"rollback refused at half its deadline", turn.KindRollback, 200 * time.Millisecond, false, "in_progress"},
		{"publish refused at half its deadline", turn.KindPublish, 200 * time.Millisecond, false, "in_progress"},
		{"agent turn waits its whole deadline", turn.KindAgent, 200 * time.Millisecond, false, "deadline"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := turn.NewSlot(turn.SlotOptions{})
			release := holdSlot(t, s)
			ctx := context.Background()
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.deadline)
				defer cancel()
			}
			ran := false
			errc := make(chan error, 1)
			go func() {
				errc <- s.Hold(ctx, tc.kind, func(context.Context) error { ran = true; return nil })
			}()
			var err error
			if tc.release {
				for s.Waiting() != 1 {
					select {
					case err = <-errc:
						t.Fatalf("ended (%v) while the turn held the slot", err)
					default:
						runtime.Gosched()
					}
				}
				release()
				err = <-errc
			} else {
				err = <-errc
				release()
			}
			var busy *turn.InProgressError
			switch tc.want {
			case "ran":
				if err != nil || !ran {
					t.Fatalf("err %v ran %v: want the turn to run after the first", err, ran)
				}
			case "in_progress":
				if !errors.As(err, &busy) || ran || busy.Holder != turn.KindAgent || busy.Kind != tc.kind || busy.RetryAfter <= 0 {
					t.Fatalf("err %v ran %v: want *InProgressError naming the agent turn", err, ran)
				}
				if busy.Waited >= tc.deadline {
					t.Fatalf("waited %s of a %s deadline: the run gets the other half", busy.Waited, tc.deadline)
				}
			case "deadline":
				if !errors.Is(err, context.DeadlineExceeded) || ran {
					t.Fatalf("err %v ran %v: want the deadline", err, ran)
				}
			}
			if n := s.Waiting(); n != 0 {
				t.Fatalf("%d still counted as waiting", n)
			}
		})
	}
}

// Drain waits for the running turn and closes the slot: every later kind
// but the shutdown flush is refused with ErrClosed.
func TestSlotDrain(t *testing.T) {
	t.Parallel()
	s := turn.NewSlot(turn.SlotOptions{})
	release := holdSlot(t, s)
	drained := make(chan error, 1)
	go func() { drained <- s.Drain(context.Background()) }()
	select {
	case err := <-drained:
		t.Fatalf("drained (%v) while a turn ran", err)
	default:
	}
	release()
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	for _, k := range []turn.Kind{turn.KindAgent, turn.KindRollback, turn.KindFlush, turn.KindPublish} {
		if err := s.Hold(context.Background(), k, func(context.Context) error { return nil }); !errors.Is(err, turn.ErrClosed) {
			t.Fatalf("%s after the drain: %v, want ErrClosed", k, err)
		}
	}
	ran := false
	if err := s.Hold(context.Background(), turn.KindShutdown, func(context.Context) error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("the shutdown flush after the drain: %v ran %v", err, ran)
	}
}
