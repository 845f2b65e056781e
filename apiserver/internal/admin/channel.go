package admin

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/apiserver/internal/store"
)

func (a *cli) channelCommands() []*cobra.Command {
	var project, secret, headers string
	var generate bool
	set := a.verb("set", "--project P [--secret S | --generate-secret] [--callback-headers JSON]", []string{"project"},
		func(ctx context.Context, c *cobra.Command) (any, error) {
			var secretP, headersP *string
			if c.Flags().Changed("secret") {
				secretP = &secret
			}
			if c.Flags().Changed("callback-headers") {
				headersP = &headers
			}
			if headersP != nil {
				var m map[string]string
				if err := json.Unmarshal([]byte(*headersP), &m); err != nil {
					return nil, fmt.Errorf("%w: --callback-headers must be a JSON object of strings", ErrUsage)
				}
			}
			if generate && secretP != nil {
				return nil, fmt.Errorf("%w: --secret and --generate-secret exclude each other", ErrUsage)
			}
			if _, err := a.env.Store.GetProject(ctx, project); err != nil {
				return nil, err
			}
			gen := generate
			if !gen && secretP == nil {
				// A channel without a secret rejects every request: a new one
				// gets a generated secret by default.
				existing, err := a.env.Store.GetChannel(ctx, project)
				if errors.Is(err, store.ErrNotFound) || (err == nil && existing.Secret == "") {
					gen = true
				} else if err != nil {
					return nil, err
				}
			}
			if gen {
				s, err := GenerateChannelSecret()
				if err != nil {
					return nil, err
				}
				secretP = &s
			}
			ch, err := a.env.Store.SetChannel(ctx, project, secretP, headersP)
			if err != nil {
				return nil, err
			}
			out := map[string]any{"channelId": ch.ID, "projectId": ch.ProjectID, "hasSecret": ch.Secret != "",
				"callbackHeaders": json.RawMessage(ch.CallbackHeaders)}
			if gen {
				out["secret"] = ch.Secret // shown once, like a new API key
			}
			return out, nil
		})
	set.Flags().StringVar(&project, "project", "", "project id")
	set.Flags().StringVar(&secret, "secret", "", "the channel secret (X-Webhook-Secret)")
	set.Flags().BoolVar(&generate, "generate-secret", false, "generate a whsec_ secret (printed once)")
	set.Flags().StringVar(&headers, "callback-headers", "", "JSON object of headers sent with callbacks")
	return []*cobra.Command{noun("channel", append(append([]*cobra.Command{set}, a.channelRotateCommands()...), a.channelSigningCommands()...)...)}
}

// GenerateChannelSecret returns a new channel secret in the Standard
// Webhooks form: "whsec_" and the base64 of 32 random bytes. Callers send it
// as X-Webhook-Secret; callback receivers verify webhook-signature with it
// (a Standard Webhooks library base64-decodes what follows the prefix and
// uses those bytes as the HMAC-SHA256 key; see docs/webhook-delivery.md).
func GenerateChannelSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(b[:]), nil
}
