package turn_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/svc-dev/svc/podagent/internal/agentloop"
	"github.com/svc-dev/svc/podagent/internal/turn"
)

// steps records the order of a turn's steps in one list.
type steps struct {
	mu  sync.Mutex
	log []string
}

func (s *steps) add(e string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, e)
}

func (s *steps) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

type agent struct {
	s       *steps
	run     func(ctx context.Context) (agentloop.Result, error)
	arrived chan struct{}
	gate    chan struct{}
}

func (a *agent) Run(ctx context.Context, req agentloop.Request) (agentloop.Result, error) {
	a.s.add("agent " + req.Message)
	if a.gate != nil {
		a.arrived <- struct{}{}
		<-a.gate
	}
	return a.run(ctx)
}

type committer struct {
	s   *steps
	err error
}

func (c *committer) Turn(ctx context.Context, msg string) (string, error) {
	if _, ok := ctx.Deadline(); !ok {
		c.s.add("commit without a deadline")
	}
	c.s.add("commit " + msg)
	if c.err != nil {
		return "", c.err
	}
	return "sha1", nil
}

// A turn is agent → journal → commit (persist and record inside) → return,
// in every outcome: the reply is journaled before the commit, a change is
// committed also when the agent failed, and a failed commit fails the turn.
func TestTurnOrder(t *testing.T) {
	t.Parallel()
	agentErr := &agentloop.Error{Code: "max_iterations", Message: "stopped"}
	for _, tc := range []struct {
		name      string
		changed   bool
		agentErr  error
		commitErr error
		noJournal bool
		want      []string
		wantCode  string
		wantSHA   string
	}{
		{name: "changed", changed: true, want: []string{"agent m", "journal ok", "commit webhook: m"}, wantSHA: "sha1"},
		{name: "nothing changed", want: []string{"agent m", "journal ok"}},
		{name: "agent failed after a change", changed: true, agentErr: agentErr,
			want: []string{"agent m", "journal failed", "commit webhook: m"}, wantCode: "max_iterations", wantSHA: "sha1"},
		{name: "commit failed", changed: true, commitErr: errors.New("fenced"),
			want: []string{"agent m", "journal ok", "commit webhook: m"}, wantCode: "commit_failed"},
		{name: "no journal", changed: true, noJournal: true, want: []string{"agent m", "commit webhook: m"}, wantSHA: "sha1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := &steps{}
			a := &agent{s: s, run: func(context.Context) (agentloop.Result, error) {
				res := agentloop.Result{Reply: "done", Changed: tc.changed}
				if tc.agentErr != nil {
					return agentloop.Failed(res, tc.agentErr)
				}
				return res, nil
			}}
			r := turn.New(turn.Options{Agent: a, Committer: &committer{s: s, err: tc.commitErr}})
			var journal turn.Journal
			if !tc.noJournal {
				journal = func(res agentloop.Result, err error) {
					if err != nil {
						s.add("journal failed")
						return
					}
					s.add("journal " + map[bool]string{true: "ok", false: "bad reply"}[res.Reply == "done"])
				}
			}
			res, err := r.Run(context.Background(), agentloop.Request{Message: "m", Channel: "webhook"}, journal)
			if got := s.got(); !slices.Equal(got, tc.want) {
				t.Fatalf("steps = %q, want %q", got, tc.want)
			}
			if res.CommitSHA != tc.wantSHA {
				t.Errorf("CommitSHA = %q, want %q", res.CommitSHA, tc.wantSHA)
			}
			var ae *agentloop.Error
			switch {
			case tc.wantCode == "" && err != nil:
				t.Errorf("err = %v", err)
			case tc.wantCode != "" && (!errors.As(err, &ae) || ae.Code != tc.wantCode || !strings.Contains(res.Reply, tc.wantCode)):
				t.Errorf("err = %v, reply %q, want code %s", err, res.Reply, tc.wantCode)
			}
		})
	}
}

// Turns run one at a time: a second turn waits for the first to end its
// commit, and one whose context ends while waiting never reaches the agent.
func TestOneTurnAtATime(t *testing.T) {
	t.Parallel()
	s := &steps{}
	gate := make(chan struct{})
	a := &agent{s: s, gate: gate, arrived: make(chan struct{}), run: func(context.Context) (agentloop.Result, error) {
		return agentloop.Result{Reply: "r", Changed: true}, nil
	}}
	r := turn.New(turn.Options{Agent: a, Committer: &committer{s: s}})
	done := make(chan error, 1)
	go func() {
		_, err := r.Run(context.Background(), agentloop.Request{Message: "first", Channel: "webhook"}, nil)
		done <- err
	}()
	<-a.arrived // the first turn holds the project
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := r.Run(ctx, agentloop.Request{Message: "second"}, nil)
	var ae *agentloop.Error
	if !errors.As(err, &ae) || ae.Code != "canceled" {
		t.Fatalf("second turn: %v", err)
	}
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, want := s.got(), []string{"agent first", "commit webhook: first"}; !slices.Equal(got, want) {
		t.Fatalf("steps = %q, want %q", got, want)
	}
}
