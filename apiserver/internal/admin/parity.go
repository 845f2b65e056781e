package admin

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/apiserver/internal/parity"
)

func (a *cli) parityCommands() []*cobra.Command {
	var id string
	var since time.Duration
	check := a.verb("parity-check", "[--project P] [--since 24h]  (one checkpoint row per turn; exit 1 on a mismatch)", nil,
		func(ctx context.Context, _ *cobra.Command) (any, error) {
			c := &parity.Checker{Store: a.env.Store}
			if a.env.Objects != nil {
				objs, err := a.env.Objects(ctx)
				if err != nil {
					return nil, err
				}
				c.Objects = objs
			}
			return c.Run(ctx, id, since)
		})
	check.Flags().StringVar(&id, "project", "", "one project (default: every project)")
	check.Flags().DurationVar(&since, "since", 24*time.Hour, "turns of this long ago and newer")
	return []*cobra.Command{check}
}
