package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/apiserver/internal/store"
)

// DefaultRotationOverlap is how long a rotated channel secret stays valid
// next to the new one (Svix keeps the old one 24 hours).
const DefaultRotationOverlap = 24 * time.Hour

// Secret rotation without downtime (docs/webhook-delivery.md):
// `channel rotate-secret` generates a new secret and keeps the current one
// valid for --overlap (both accepted in X-Webhook-Secret, callbacks signed
// with both); `channel drop-old-secret` ends the overlap at once.
func (a *cli) channelRotateCommands() []*cobra.Command {
	var project, dropProject string
	var overlap time.Duration
	rotate := a.verb("rotate-secret", "--project P [--overlap 24h]  (new secret; the old one stays valid for the overlap)", []string{"project"},
		func(ctx context.Context, _ *cobra.Command) (any, error) {
			if overlap < 0 || overlap > 30*24*time.Hour {
				return nil, fmt.Errorf("%w: --overlap must be between 0 and 720h", ErrUsage)
			}
			secret, err := GenerateChannelSecret()
			if err != nil {
				return nil, err
			}
			ch, err := a.env.Store.RotateChannelSecret(ctx, project, secret, overlap)
			if errors.Is(err, store.ErrNotFound) {
				return nil, fmt.Errorf("project %s has no channel yet; create it with `channel set`", project)
			}
			if err != nil {
				return nil, err
			}
			out := map[string]any{"channelId": ch.ID, "projectId": ch.ProjectID, "secret": ch.Secret}
			if ch.PreviousSecretExpiresAt != nil {
				out["previousSecretExpiresAt"] = ch.PreviousSecretExpiresAt.UTC()
			}
			return out, nil
		})
	rotate.Flags().StringVar(&project, "project", "", "project id")
	rotate.Flags().DurationVar(&overlap, "overlap", DefaultRotationOverlap, "how long the old secret stays valid")
	drop := a.verb("drop-old-secret", "--project P  (end a rotation's overlap now)", []string{"project"},
		func(ctx context.Context, _ *cobra.Command) (any, error) {
			ch, err := a.env.Store.DropPreviousSecret(ctx, dropProject)
			if err != nil {
				return nil, err
			}
			return map[string]any{"channelId": ch.ID, "projectId": ch.ProjectID, "previousSecret": false}, nil
		})
	drop.Flags().StringVar(&dropProject, "project", "", "project id")
	return []*cobra.Command{rotate, drop}
}
