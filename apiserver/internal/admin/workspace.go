package admin

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/apiserver/internal/store"
)

func (a *cli) workspaceCommands() []*cobra.Command {
	var id, name, createPlan, plan, ubp string
	create := a.verb("create", "--name N [--plan P]", []string{"name"}, func(ctx context.Context, _ *cobra.Command) (any, error) {
		if _, ok := a.env.Catalog.Plan(createPlan); !ok {
			return nil, fmt.Errorf("unknown plan %q", createPlan)
		}
		return a.env.Store.CreateWorkspace(ctx, name, createPlan)
	})
	create.Flags().StringVar(&name, "name", "", "workspace name")
	create.Flags().StringVar(&createPlan, "plan", "free", "plan of the catalog")
	set := a.verb("set", "--id W [--plan P] [--usage-based-pricing=true|false]", []string{"id"}, func(ctx context.Context, _ *cobra.Command) (any, error) {
		var planP *string
		if plan != "" {
			if _, ok := a.env.Catalog.Plan(plan); !ok {
				return nil, fmt.Errorf("unknown plan %q", plan)
			}
			planP = &plan
		}
		var ubpP *bool
		switch ubp {
		case "":
		case "true", "false":
			v := ubp == "true"
			ubpP = &v
		default:
			return nil, fmt.Errorf("%w: --usage-based-pricing must be true or false", ErrUsage)
		}
		return a.env.Store.UpdateWorkspace(ctx, id, planP, ubpP)
	})
	set.Flags().StringVar(&id, "id", "", "workspace id")
	set.Flags().StringVar(&plan, "plan", "", "plan of the catalog")
	set.Flags().StringVar(&ubp, "usage-based-pricing", "", "true or false")
	return []*cobra.Command{noun("workspace", create, set)}
}

func (a *cli) memberCommands() []*cobra.Command {
	var ws, user, role string
	add := a.verb("add", "--workspace W --user U [--role owner|member]", []string{"workspace", "user"}, func(ctx context.Context, _ *cobra.Command) (any, error) {
		if role == "" {
			return a.env.Store.AddMember(ctx, ws, user)
		}
		if !store.ValidRole(role) {
			return nil, fmt.Errorf("%w: --role must be owner or member", ErrUsage)
		}
		return a.env.Store.SetMember(ctx, ws, user, role)
	})
	add.Flags().StringVar(&ws, "workspace", "", "workspace id")
	add.Flags().StringVar(&user, "user", "", "user id")
	add.Flags().StringVar(&role, "role", "", "owner or member (default: member, or the role the user has)")
	return []*cobra.Command{noun("member", add)}
}
