package admin

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/wire"
)

// Asymmetric signatures (docs/webhook-delivery.md "Asymmetric signatures"):
// `channel signing-key --project P` gives the channel a new ed25519 key
// (callbacks then carry v1a beside v1) and prints its public half (whpk_);
// `--remove` goes back to v1 only. The private key never leaves the API
// and the pod.
func (a *cli) channelSigningCommands() []*cobra.Command {
	var project string
	var remove bool
	cmd := a.verb("signing-key", "--project P [--remove]  (new ed25519 key for v1a signatures; prints the whpk_ public key)", []string{"project"},
		func(ctx context.Context, _ *cobra.Command) (any, error) {
			key := ""
			if !remove {
				var err error
				if key, err = wire.NewWebhookSigningKey(); err != nil {
					return nil, err
				}
			}
			ch, err := a.env.Store.SetChannelSigningKey(ctx, project, key)
			if errors.Is(err, store.ErrNotFound) {
				return nil, fmt.Errorf("project %s has no channel yet; create it with `channel set`", project)
			}
			if err != nil {
				return nil, err
			}
			out := map[string]any{"channelId": ch.ID, "projectId": ch.ProjectID, "publicKey": ""}
			if key != "" {
				if out["publicKey"], err = wire.WebhookPublicKey(key); err != nil {
					return nil, err
				}
			}
			return out, nil
		})
	cmd.Flags().StringVar(&project, "project", "", "project id")
	cmd.Flags().BoolVar(&remove, "remove", false, "remove the key (v1 HMAC signatures only)")
	return []*cobra.Command{cmd}
}
