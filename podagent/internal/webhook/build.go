package webhook

import (
	"fmt"
	"net/http"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/agentloop"
	"github.com/svc-dev/svc/podagent/internal/callback"
	"github.com/svc-dev/svc/podagent/internal/channelcfg"
)

// PodOptions are what a pod knows when it wires the channel.
type PodOptions struct {
	APIURL       string
	ProjectID    string
	RuntimeToken string
	Workspace    string
	// Committer ends a turn that changed files (pod.Pod).
	Committer agentloop.Committer
	Ready     func() error
	Settings  Settings
	Log       *zap.Logger
	// HTTP is used for the API (channel config, completions); nil: default.
	HTTP *http.Client
}

// PodDeps assembles the production Deps of a pod: channel config from the
// API, the tool loop against the gateway, guarded callbacks. Handler.Shutdown
// closes the agent.
func PodDeps(o PodOptions) (Deps, error) {
	s := o.Settings
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	agent, err := agentloop.New(agentloop.Options{APIURL: o.APIURL, ProjectID: o.ProjectID, Token: o.RuntimeToken,
		Model: s.AgentModel, HTTP: o.HTTP, Workspace: o.Workspace, Committer: o.Committer,
		MaxIterations: s.MaxIterations, Log: o.Log})
	if err != nil {
		return Deps{}, fmt.Errorf("webhook: %w", err)
	}
	cb := callback.New(callback.Options{Guard: callback.NewGuard(s.AllowedNets), Attempts: s.CallbackAttempts,
		RetryBase: s.CallbackBase, RetryMax: s.CallbackMax, AttemptTimeout: s.CallbackTimeout, Log: o.Log})
	return Deps{
		Channel: &channelcfg.Client{APIURL: o.APIURL, ProjectID: o.ProjectID, Token: o.RuntimeToken, HTTP: o.HTTP,
			TTL: s.ChannelConfigTTL},
		Agent:        agent,
		Callbacks:    cb,
		Ready:        o.Ready,
		Log:          o.Log,
		SyncTimeout:  s.SyncTimeout,
		TurnTimeout:  s.TurnTimeout,
		MaxBodyBytes: s.MaxBodyBytes,
		Closer:       agent,
	}, nil
}
