package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/runtimetoken"
	"github.com/svc-dev/svc/shared/syncmode"
)

func (a *cli) projectCommands() []*cobra.Command {
	var id, ws, name, mode, sub, podURL string
	var force, restart bool
	create := a.verb("create", "--workspace W --name N", []string{"workspace", "name"}, func(ctx context.Context, _ *cobra.Command) (any, error) {
		return a.env.Store.CreateProject(ctx, ws, name)
	})
	create.Flags().StringVar(&ws, "workspace", "", "workspace id")
	create.Flags().StringVar(&name, "name", "", "project name")

	show := a.verb("show", "--id P", []string{"id"}, func(ctx context.Context, _ *cobra.Command) (any, error) {
		p, err := a.env.Store.GetProject(ctx, id)
		if err != nil {
			return nil, err
		}
		// The channel's id is what the outbox poll needs (empty: no channel yet).
		out := struct {
			store.Project
			ChannelID string `json:"channelId"`
		}{Project: p}
		if ch, err := a.env.Store.GetChannel(ctx, id); err == nil {
			out.ChannelID = ch.ID
		}
		return out, nil
	})

	setSyncMode := a.verb("set-sync-mode", "--id P --mode s3|dual_shadow|git_only [--force] [--restart]  (dual_shadow cohort: at most 10 projects, 7 days)",
		[]string{"id", "mode"}, func(ctx context.Context, _ *cobra.Command) (any, error) {
			m, err := syncmode.Parse(mode)
			if err != nil || mode == "" {
				return nil, fmt.Errorf("%w: --mode must be s3, dual_shadow or git_only", ErrUsage)
			}
			p, err := SetSyncMode(ctx, a.env.Store, id, m, force, time.Now())
			if err != nil || !restart {
				return p, err
			}
			// Spec 3.1: the mode applies at the next pod assignment; --restart
			// asks for that assignment now.
			if _, err := a.env.Store.RestartRuntime(ctx, id); err != nil && !errors.Is(err, store.ErrNotFound) {
				return nil, err
			}
			return p, nil
		})
	setSyncMode.Flags().StringVar(&mode, "mode", "", "s3, dual_shadow or git_only")
	setSyncMode.Flags().BoolVar(&force, "force", false, "go beyond the dual_shadow cohort guidance")
	setSyncMode.Flags().BoolVar(&restart, "restart", false, "replace the runtime now")

	restartCmd := a.verb("restart", "--id P", []string{"id"}, func(ctx context.Context, _ *cobra.Command) (any, error) {
		if _, err := a.env.Store.GetProject(ctx, id); err != nil {
			return nil, err
		}
		// The next request replaces the runtime (kubernetes: the next pod
		// generation, with the project's current sync mode); the replaced
		// pod stops gracefully first.
		r, err := a.env.Store.RestartRuntime(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return map[string]any{"projectId": id, "restarted": false, "reason": "the project has no runtime yet"}, nil
		}
		if err != nil {
			return nil, err
		}
		return map[string]any{"projectId": id, "restarted": r.Driver != store.DriverPaired, "driver": r.Driver,
			"generation": r.Generation}, nil
	})

	runtimeToken := a.verb("runtime-token", "--id P", []string{"id"}, func(ctx context.Context, _ *cobra.Command) (any, error) {
		if len(a.env.RuntimeSecret) == 0 {
			return nil, errors.New("SVC_RUNTIME_AUTH_SECRET is not set")
		}
		if _, err := a.env.Store.GetProject(ctx, id); err != nil {
			return nil, err
		}
		return map[string]string{"token": runtimetoken.Mint(a.env.RuntimeSecret, id)}, nil
	})

	publish := a.verb("publish", "--id P --subdomain S [--pod-url U]", []string{"id", "subdomain"}, func(ctx context.Context, _ *cobra.Command) (any, error) {
		if a.env.Publish == nil {
			return nil, errors.New("publish is not available in this build")
		}
		if len(a.env.RuntimeSecret) == 0 {
			return nil, errors.New("SVC_RUNTIME_AUTH_SECRET is not set")
		}
		if _, err := a.env.Store.GetProject(ctx, id); err != nil {
			return nil, err
		}
		u := podURL
		if u == "" {
			// The agent the project is pinned to (local or kubernetes driver).
			r, err := a.env.Store.GetRuntimeAssignment(ctx, id)
			if err != nil || r.Endpoint == "" || r.Driver == store.DriverPaired {
				return nil, fmt.Errorf("%w: the project has no running agent to publish from; send it a webhook message first or pass --pod-url", ErrUsage)
			}
			u = r.Endpoint
		}
		sha, tag, err := a.env.Publish(ctx, u, runtimetoken.Mint(a.env.RuntimeSecret, id), sub, time.Now())
		if err != nil {
			return nil, err
		}
		if _, err := a.env.Store.SetPublished(ctx, id, sha, tag); err != nil {
			return nil, err
		}
		return map[string]string{"sha": sha, "tag": tag}, nil
	})
	publish.Flags().StringVar(&sub, "subdomain", "", "the publish target")
	publish.Flags().StringVar(&podURL, "pod-url", "", "the agent's URL (default: the runtime the project is pinned to)")

	for _, c := range []*cobra.Command{show, setSyncMode, restartCmd, runtimeToken, publish} {
		c.Flags().StringVar(&id, "id", "", "project id")
	}
	return []*cobra.Command{noun("project", create, show, setSyncMode, restartCmd, runtimeToken, publish)}
}
