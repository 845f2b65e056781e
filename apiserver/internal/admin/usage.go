package admin

import (
	"context"
	"errors"
	"time"

	"github.com/spf13/cobra"
)

func (a *cli) usageCommands() []*cobra.Command {
	var ws string
	show := a.verb("show", "--workspace W", []string{"workspace"}, func(ctx context.Context, _ *cobra.Command) (any, error) {
		return ShowUsage(ctx, a.env, ws)
	})
	show.Flags().StringVar(&ws, "workspace", "", "workspace id")
	return []*cobra.Command{noun("usage", show)}
}

// ShowUsage reports a workspace's totals and its windows against the plan.
func ShowUsage(ctx context.Context, env *Env, workspaceID string) (any, error) {
	w, err := env.Store.GetWorkspace(ctx, workspaceID)
	if err != nil {
		return nil, err
	}
	totals, errTotals := env.Store.SumUsage(ctx, workspaceID)
	byDeployment, errByDeployment := env.Store.SumUsageByDeployment(ctx, workspaceID)
	counters, errCounters := env.Store.UsageWindows(ctx, workspaceID)
	if err := errors.Join(errTotals, errByDeployment, errCounters); err != nil {
		return nil, err
	}
	plan, _ := env.Catalog.Plan(w.Plan)
	now := time.Now().UnixMilli()
	windows := []map[string]any{}
	for _, pw := range plan.Windows {
		entry := map[string]any{"name": pw.Name, "limitMicro": pw.LimitMicro(), "usedMicro": int64(0)}
		for _, c := range counters {
			if c.WindowName == pw.Name && c.ResetsAt > now {
				entry["usedMicro"] = c.CreditsMicro
				entry["resetsAt"] = time.UnixMilli(c.ResetsAt).UTC()
			}
		}
		windows = append(windows, entry)
	}
	return map[string]any{"workspace": w, "totals": totals, "byDeployment": byDeployment, "windows": windows}, nil
}
