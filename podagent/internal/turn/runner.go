// Package turn is the pod's turn (spec 2.4, 6, 10.1, 10.2, 10.6.3;
// docs/sync-modes.md §6, §12) and its one lock, the Slot. A channel turn is
// Runner.Run: the agent talks to the model and runs its tools (agentloop),
// then the reply is journaled, then what the tools changed is committed —
// and, inside the commit, persisted and recorded by the pod's sync strategy
// (syncstrategy, through gitsync) — and only then does Run return, so the
// channel delivers a reply whose turn is as durable as the mode makes it.
// A rollback, a git flush, a publish and the shutdown flush are turns of
// their own kind on the same Slot: none of them runs beside an agent's
// tools or cuts into a commit.
package turn

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/agentloop"
	"github.com/svc-dev/svc/shared/settings"
)

// DefaultCommitTimeout bounds the commit (with its persist and record).
const DefaultCommitTimeout = 2 * time.Minute

// Agent talks to the model and runs tools (agentloop.Agent). It reports in
// Result.Changed whether a tool changed a file; it commits nothing.
type Agent interface {
	Run(ctx context.Context, req agentloop.Request) (agentloop.Result, error)
}

// Committer ends a turn that changed files: stage, commit, then the sync
// strategy's persist and record (pod.Pod.Turn). It returns "" when nothing
// changed.
type Committer interface {
	Turn(ctx context.Context, message string) (sha string, err error)
}

// Options configure a Runner.
type Options struct {
	Agent Agent
	// Committer nil: the turn's changes are left in the work tree (a
	// channel without a repository, tests).
	Committer Committer
	// CommitTimeout bounds the commit; it runs detached from the turn's
	// context, so a turn cut off mid-commit still ends its commit.
	CommitTimeout time.Duration
	// Slot is the pod's one turn lock (nil: a slot of the Runner's own).
	Slot *Slot
	Log  *zap.Logger
}

// Journal stores a turn's reply before its commit (the async inbox), so a
// turn that committed is never run again; it is called with the reply Run
// would return for the agent's outcome.
type Journal func(res agentloop.Result, err error)

// Runner runs turns in order. Safe for concurrent use.
type Runner struct {
	o   Options
	log *zap.Logger
}

// New returns a Runner.
func New(o Options) *Runner {
	o.CommitTimeout = settings.PositiveOr(o.CommitTimeout, DefaultCommitTimeout)
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Slot == nil {
		o.Slot = NewSlot(SlotOptions{})
	}
	return &Runner{o: o, log: o.Log.Named("turn")}
}

// Run is one turn, top-down: agent (model and tools) → journal the reply →
// commit (persist and record inside) → return for delivery. The changes are
// committed also when the agent failed part-way, so none is left
// uncommitted; a failed commit fails a turn that had succeeded
// (commit_failed).
func (r *Runner) Run(ctx context.Context, req agentloop.Request, journal Journal) (res agentloop.Result, err error) {
	herr := r.o.Slot.Hold(ctx, KindAgent, func(ctx context.Context) error {
		res, err = r.run(ctx, req, journal)
		return nil
	})
	if errors.Is(herr, ErrClosed) {
		return agentloop.Failed(agentloop.Result{}, &agentloop.Error{Code: "shutting_down",
			Message: "the agent is shutting down", Cause: herr})
	}
	if herr != nil {
		return agentloop.Failed(agentloop.Result{}, agentloop.ContextError(ctx))
	}
	return res, err
}

func (r *Runner) run(ctx context.Context, req agentloop.Request, journal Journal) (agentloop.Result, error) {
	res, err := r.o.Agent.Run(ctx, req)
	if journal != nil {
		journal(res, err)
	}
	if res.Changed && r.o.Committer != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.o.CommitTimeout)
		sha, cerr := r.o.Committer.Turn(cctx, agentloop.CommitMessage(req))
		cancel()
		res.CommitSHA = sha
		if cerr != nil && err == nil {
			r.log.Warn("committing the turn failed", zap.String("correlationId", req.CorrelationID), zap.Error(cerr))
			return agentloop.Failed(res, &agentloop.Error{Code: "commit_failed",
				Message: "the agent's changes could not be committed", Cause: cerr})
		}
	}
	return res, err
}
