package turn

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Kind is what a turn does. Every kind takes the same slot.
type Kind string

// The kinds of turn.
const (
	KindAgent    Kind = "agent"    // a channel message: the agent, then the commit
	KindRollback Kind = "rollback" // POST /agent/restore
	KindFlush    Kind = "flush"    // POST /agent/git-flush without a tag
	KindPublish  Kind = "publish"  // POST /agent/git-flush with a tag
	KindShutdown Kind = "shutdown" // the shutdown git flush, after Drain
	KindExport   Kind = "export"   // the micro-VM guest's export flush
)

// Waits decides how long a kind waits for the slot.
const (
	// DefaultMaxWait caps how long a rollback or a flush waits for the turn
	// in flight before it is refused with turn_in_progress.
	DefaultMaxWait = time.Minute
	// RetryAfter is the Retry-After of a refusal.
	RetryAfter = 5 * time.Second
)

// ErrClosed: Drain ran; only the shutdown turn runs after it.
var ErrClosed = errors.New("turn: the pod is shutting down")

// InProgressError refuses a turn that waited for the slot as long as its
// caller's deadline allows while another turn held it (409
// turn_in_progress with Retry-After, docs/sync-modes.md §6).
type InProgressError struct {
	Kind, Holder Kind
	Waited       time.Duration
	RetryAfter   time.Duration
}

func (e *InProgressError) Error() string {
	return fmt.Sprintf("turn: a %s turn is running; the %s waited %s", e.Holder, e.Kind, e.Waited.Round(time.Millisecond))
}

// Slot is the pod's one turn lock: a channel turn holds it from the agent's
// first tool to its commit; a rollback, a flush, a publish and the
// shutdown flush hold it for their whole run. Nothing else serialises
// turns. The zero value is not usable; make one with NewSlot.
type Slot struct {
	one     chan struct{}
	maxWait time.Duration

	mu      sync.Mutex
	holder  Kind
	since   time.Time
	waiting int
	closed  bool
	// onWaiting observes the number of turns waiting (a gauge).
	onWaiting func(n int)
	onWait    func(kind Kind)
}

// SlotOptions configure a Slot.
type SlotOptions struct {
	// MaxWait caps the wait of a rollback or flush (DefaultMaxWait).
	MaxWait time.Duration
	// OnWaiting, when set, is told the number of waiting turns on every
	// change (the svc_podagent_turns_waiting gauge).
	OnWaiting func(n int)
	// OnWait, when set, is called by a turn that found the slot held, right
	// before it waits (the pod's turn-waiting test pause point).
	OnWait func(kind Kind)
}

// NewSlot returns a free slot.
func NewSlot(o SlotOptions) *Slot {
	if o.MaxWait <= 0 {
		o.MaxWait = DefaultMaxWait
	}
	return &Slot{one: make(chan struct{}, 1), maxWait: o.MaxWait, onWaiting: o.OnWaiting, onWait: o.OnWait}
}

// Hold runs fn as a turn of the given kind. An agent turn waits for the
// slot as long as ctx lets it. Any other kind waits at most half of what is
// left of ctx's deadline (the other half is its own run's), and at most
// MaxWait; then it fails with *InProgressError and fn does not run.
func (s *Slot) Hold(ctx context.Context, kind Kind, fn func(ctx context.Context) error) error {
	release, err := s.acquire(ctx, kind)
	if err != nil {
		return err
	}
	defer release()
	return fn(ctx)
}

func (s *Slot) acquire(ctx context.Context, kind Kind) (func(), error) {
	start := time.Now()
	var limit <-chan time.Time
	if kind != KindAgent && kind != KindShutdown {
		wait := s.maxWait
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(dl)/2)
		}
		t := time.NewTimer(max(wait, 0))
		defer t.Stop()
		limit = t.C
	}
	select {
	case s.one <- struct{}{}:
	default:
		s.setWaiting(+1)
		if s.onWait != nil {
			s.onWait(kind)
		}
		var err error
		select {
		case s.one <- struct{}{}:
		case <-ctx.Done():
			err = ctx.Err()
		case <-limit:
			s.mu.Lock()
			holder := s.holder
			s.mu.Unlock()
			err = &InProgressError{Kind: kind, Holder: holder, Waited: time.Since(start), RetryAfter: RetryAfter}
		}
		s.setWaiting(-1)
		if err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	if s.closed && kind != KindShutdown {
		s.mu.Unlock()
		<-s.one
		return nil, ErrClosed
	}
	s.holder, s.since = kind, time.Now()
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.holder = ""
		s.mu.Unlock()
		<-s.one
	}, nil
}

func (s *Slot) setWaiting(d int) {
	s.mu.Lock()
	s.waiting += d
	n := s.waiting
	s.mu.Unlock()
	if s.onWaiting != nil {
		s.onWaiting(n)
	}
}

// Waiting is the number of turns waiting for the slot.
func (s *Slot) Waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting
}

// Holder is the kind of the running turn ("" when the slot is free).
func (s *Slot) Holder() Kind {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holder
}

// Drain waits for the turn in flight (until ctx ends) and closes the slot:
// every later turn but the shutdown flush fails with ErrClosed (spec
// 10.2.1).
func (s *Slot) Drain(ctx context.Context) error {
	select {
	case s.one <- struct{}{}:
	case <-ctx.Done():
		s.mu.Lock()
		s.closed = true // what comes after the running turn is refused
		s.mu.Unlock()
		return ctx.Err()
	}
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	<-s.one
	return nil
}
