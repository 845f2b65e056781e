package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/apiserver/internal/lfsgc"
)

func (a *cli) lfsCommands() []*cobra.Command {
	var id string
	var dry bool
	var grace time.Duration
	gc := a.verb("gc", "--project P [--dry-run] [--grace 168h]  (delete large-file objects no ref or tag reaches)", []string{"project"},
		func(ctx context.Context, _ *cobra.Command) (any, error) {
			if grace < time.Hour {
				return nil, fmt.Errorf("%w: --grace must be at least 1h (an in-flight push must never be collected)", ErrUsage)
			}
			if _, err := a.env.Store.GetProject(ctx, id); err != nil {
				return nil, err
			}
			if a.env.Objects == nil {
				return nil, errors.New("lfs gc needs the object store")
			}
			objs, err := a.env.Objects(ctx)
			if err != nil {
				return nil, err
			}
			return (&lfsgc.GC{Objects: objs, Grace: grace, Log: a.env.Log}).Project(ctx, id, dry)
		})
	gc.Flags().StringVar(&id, "project", "", "project id")
	gc.Flags().BoolVar(&dry, "dry-run", false, "list what would be deleted")
	gc.Flags().DurationVar(&grace, "grace", lfsgc.DefaultGrace, "keep objects younger than this")
	return []*cobra.Command{noun("lfs", gc)}
}
