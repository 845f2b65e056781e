package admin

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
)

// DefaultRotationOverlap is how long a rotated channel secret stays valid
// next to the new one (Svix keeps the old one 24 hours).
const DefaultRotationOverlap = 24 * time.Hour

// Secret rotation without downtime (issue 24; docs/webhook-delivery.md):
// `channel rotate-secret` generates a new secret and keeps the current one
// valid for --overlap (both accepted in X-Webhook-Secret, callbacks signed
// with both); `channel drop-old-secret` ends the overlap at once.
func init() {
	register("channel rotate-secret", "--project P [--overlap 24h]  (new secret; the old one stays valid for the overlap)", func(ctx context.Context, env *Env, fs *flag.FlagSet, args []string) (any, error) {
		project, overlap := fs.String("project", "", ""), fs.Duration("overlap", DefaultRotationOverlap, "")
		if err := parse(fs, args, "project"); err != nil {
			return nil, err
		}
		if *overlap < 0 || *overlap > 30*24*time.Hour {
			return nil, fmt.Errorf("%w: --overlap must be between 0 and 720h", ErrUsage)
		}
		secret, err := GenerateChannelSecret()
		if err != nil {
			return nil, err
		}
		ch, err := env.Store.RotateChannelSecret(ctx, *project, secret, *overlap)
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("project %s has no channel yet; create it with `channel set`", *project)
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
	registerOne("channel drop-old-secret", "--project P  (end a rotation's overlap now)", "project", func(ctx context.Context, env *Env, project string) (any, error) {
		ch, err := env.Store.DropPreviousSecret(ctx, project)
		if err != nil {
			return nil, err
		}
		return map[string]any{"channelId": ch.ID, "projectId": ch.ProjectID, "previousSecret": false}, nil
	})
}
