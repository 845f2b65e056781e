package admin

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/apiserver/internal/apikey"
)

func (a *cli) keyCommands() []*cobra.Command {
	var ws, user, name, id string
	create := a.verb("create", "--workspace W --user U [--name N]  (prints the plain key once)", []string{"workspace", "user"},
		func(ctx context.Context, _ *cobra.Command) (any, error) {
			return apikey.Issue(ctx, a.env.Store, ws, user, name)
		})
	create.Flags().StringVar(&ws, "workspace", "", "workspace id")
	create.Flags().StringVar(&user, "user", "", "id of a member of the workspace")
	create.Flags().StringVar(&name, "name", "", "key name")
	revoke := a.verb("revoke", "--id K", []string{"id"}, func(ctx context.Context, _ *cobra.Command) (any, error) {
		return a.env.Store.RevokeAPIKey(ctx, id)
	})
	revoke.Flags().StringVar(&id, "id", "", "key id")
	return []*cobra.Command{noun("key", create, revoke, a.keySetBudget())}
}
