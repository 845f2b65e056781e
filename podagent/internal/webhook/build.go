package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/activity"
	"github.com/svc-dev/svc/podagent/internal/agentloop"
	"github.com/svc-dev/svc/podagent/internal/attemptlog"
	"github.com/svc-dev/svc/podagent/internal/callback"
	"github.com/svc-dev/svc/podagent/internal/channelcfg"
	"github.com/svc-dev/svc/podagent/internal/handover"
	"github.com/svc-dev/svc/podagent/internal/inbox"
	"github.com/svc-dev/svc/podagent/internal/journal"
	"github.com/svc-dev/svc/podagent/internal/outbox"
	"github.com/svc-dev/svc/podagent/internal/turn"
	"github.com/svc-dev/svc/shared/internalapi"
)

// PodOptions are what a pod knows when it wires the channel.
type PodOptions struct {
	APIURL       string
	ProjectID    string
	RuntimeToken string
	Workspace    string
	// Committer ends a turn that changed files (pod.Pod): commit, then
	// the sync strategy's persist and record.
	Committer turn.Committer
	// Slot is the pod's one turn lock, shared with rollback, git-flush,
	// publish and the shutdown flush (nil: one of the channel's own).
	Slot     *turn.Slot
	Ready    func() error
	Settings Settings
	Log      *zap.Logger
	// HTTP is used for the API (channel config, completions, outbox); nil: default.
	HTTP *http.Client
	// API is the pod's one internal client (nil: one is built from APIURL,
	// ProjectID, RuntimeToken and HTTP).
	API *internalapi.Client
	// Journal is the pod's one journal (package journal): accepted async
	// messages, messageCount, the activity window and the hand-over queue
	// (outbox messages and attempt records not yet taken by the API) live
	// in it. Required; the pod closes it after Handler.Shutdown.
	Journal *journal.DB
	// Handover is the pod's one hand-over queue on Journal (nil: one of
	// the channel's own, closed by Handler.Shutdown).
	Handover *handover.Queue
}

// PodDeps assembles the production Deps of a pod: channel config from the
// API, the tool loop against the gateway, guarded callbacks, and the outbox
// relay that hands undeliverable replies to the API's durable outbox (an
// in-memory outbox served by the pod when there is no API). Handler.Shutdown
// closes the agent and the relay.
func PodDeps(o PodOptions) (Deps, error) {
	s := o.Settings
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	agent, err := agentloop.New(agentloop.Options{APIURL: o.APIURL, ProjectID: o.ProjectID, Token: o.RuntimeToken,
		Model: s.AgentModel, HTTP: o.HTTP, Workspace: o.Workspace,
		MaxIterations: s.MaxIterations, Log: o.Log})
	if err != nil {
		return Deps{}, fmt.Errorf("webhook: %w", err)
	}
	if o.Journal == nil {
		_ = agent.Close()
		return Deps{}, errors.New("webhook: PodOptions.Journal is required")
	}
	messages, bad, err := inbox.Open(o.Journal)
	if err != nil {
		_ = agent.Close()
		return Deps{}, fmt.Errorf("webhook: message journal: %w", err)
	}
	for _, k := range bad {
		o.Log.Error("unreadable message journal entry; set aside in the journal", zap.String("key", k))
	}
	act := activity.New(nil)
	if err := act.Persist(o.Journal); err != nil {
		o.Log.Warn("the activity window of an earlier run could not be read", zap.Error(err))
	}
	api := o.API
	if api == nil {
		api = &internalapi.Client{BaseURL: o.APIURL, ProjectID: o.ProjectID, Token: o.RuntimeToken, HTTP: o.HTTP}
	}
	var ob Outbox
	var durableOutbox DurableOutbox
	// The outbox and the attempt log are kinds of the hand-over queue: the
	// attempt log goes to the API's database; without an API only the
	// activity window shows attempts.
	var rec *attemptlog.Recorder
	var recorder callback.Recorder
	closeAttempts := closers{}
	if o.APIURL != "" {
		q := o.Handover
		if q == nil {
			if q, err = handover.OpenQueue(o.Journal, handover.QueueOptions{Log: o.Log}); err != nil {
				_ = agent.Close()
				return Deps{}, fmt.Errorf("webhook: hand-over journal: %w", err)
			}
			defer q.Start()
			closeAttempts = append(closeAttempts, q) // after the views' last attempts
		}
		durableOutbox = api
		relay, err := outbox.OpenRelay(outbox.RelayOptions{Queue: q, Log: o.Log, Poster: api})
		if err != nil {
			_ = agent.Close()
			return Deps{}, fmt.Errorf("webhook: outbox journal: %w", err)
		}
		ob = relay
		if rec, err = attemptlog.New(attemptlog.Options{Queue: q, Poster: api, Log: o.Log}); err != nil {
			_ = agent.Close()
			return Deps{}, fmt.Errorf("webhook: attempt log: %w", err)
		}
		recorder = rec
		closeAttempts = append(closers{rec}, closeAttempts...)
	}
	cb := callback.New(callback.Options{Guard: callback.NewGuard(s.AllowedNets), Attempts: s.CallbackAttempts,
		RetryBase: s.CallbackBase, RetryMax: s.CallbackMax, AttemptTimeout: s.CallbackTimeout, ForwardURL: s.CallbackForwardURL,
		ForwardToken: o.RuntimeToken, Log: o.Log, Recorder: recorder})
	return Deps{
		Channel:      &channelcfg.Client{API: api, TTL: s.ChannelConfigTTL},
		Agent:        agent,
		Committer:    o.Committer,
		Slot:         o.Slot,
		Callbacks:    cb,
		Outbox:       ob,
		Journal:      messages,
		Durable:      durableOutbox,
		Activity:     act,
		Ready:        o.Ready,
		Log:          o.Log,
		SyncTimeout:  s.SyncTimeout,
		TurnTimeout:  s.TurnTimeout,
		MaxBodyBytes: s.MaxBodyBytes,
		Closer:       agent,
		Attempts:     closeAttempts.orNil(),
	}, nil
}

// closers close in order: the attempt log, then a hand-over queue of the
// channel's own.
type closers []interface {
	Close(ctx context.Context) error
}

func (cs closers) Close(ctx context.Context) error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.Close(ctx))
	}
	return errors.Join(errs...)
}

// orNil keeps no closer a nil interface.
func (cs closers) orNil() interface {
	Close(ctx context.Context) error
} {
	if len(cs) == 0 {
		return nil
	}
	return cs
}
