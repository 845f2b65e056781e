package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/apikey"
	"github.com/svc-dev/svc/apiserver/internal/console/login"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/datadir"
)

const demoWorkspace = "demo"

// bootstrapDemo creates a demo workspace, user and API key on first start and
// prints what to curl. The demo key is kept in <data dir>/demo-api-key
// (mode 0600) so a restart can print it again; it exists only in dev mode.
func bootstrapDemo(ctx context.Context, a *app, addr string) error {
	keyPath := datadir.Demo(a.cfg.DataDir, "api-key")
	ws, err := a.store.FindWorkspaceByName(ctx, demoWorkspace)
	if errors.Is(err, store.ErrNotFound) {
		if ws, err = a.store.CreateWorkspace(ctx, demoWorkspace, "free"); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	u, err := a.store.FindUserByEmail(ctx, "demo@example.com")
	if errors.Is(err, store.ErrNotFound) {
		u, err = a.store.CreateUser(ctx, "demo@example.com")
	}
	if err != nil {
		return err
	}
	if _, err := a.store.SetMember(ctx, ws.ID, u.ID, store.RoleOwner); err != nil {
		return err
	}
	b, err := os.ReadFile(keyPath)
	key := strings.TrimSpace(string(b))
	if err != nil || key == "" {
		k, err := apikey.Issue(ctx, a.store, ws.ID, u.ID, "demo")
		if err != nil {
			return err
		}
		key = k.Key
		if err := os.WriteFile(keyPath, []byte(key+"\n"), 0o600); err != nil {
			return err
		}
	}
	proj, secret, err := demoProject(ctx, a, ws.ID)
	if err != nil {
		return err
	}
	base := "http://" + addr
	link, _, err := login.CreateLoginLink(ctx, a.store, u.ID, base, time.Now())
	if err != nil {
		return err
	}
	fmt.Printf(`
  apiserver is up on embedded defaults (SQLite and fs storage under %s).
  %s

  Demo workspace %s, API key (also in %s):
    export API_KEY=%s

  Try:
    curl -s %s/api/v1/models -H "Authorization: Bearer $API_KEY"
    curl -s %s/api/v1/chat/completions -H "Authorization: Bearer $API_KEY" \
      -H 'Content-Type: application/json' \
      -d '{"model":"svc-2-0","messages":[{"role":"user","content":"hello"}]}'
    curl -sN %s/v1/chat/completions -H "Authorization: Bearer $API_KEY" \
      -H 'Content-Type: application/json' \
      -d '{"model":"svc-2.0","stream":true,"messages":[{"role":"user","content":"hello"}]}'

  Webhook channel of the demo project %s (its agent starts on the first request):
    curl -s %s/api/projects/%s/agent-proxy/agent/channels/webhook/incoming \
      -H "Authorization: Bearer $API_KEY" -H "X-Webhook-Secret: %s" \
      -H 'Content-Type: application/json' -d '{"message":"hello agent"}'
    # the dev upstream's one script: "write <path>: <text>" makes the agent call write_file (a commit)
    curl -s %s/api/projects/%s/agent-proxy/agent/channels/webhook/incoming \
      -H "Authorization: Bearer $API_KEY" -H "X-Webhook-Secret: %s" \
      -H 'Content-Type: application/json' -d '{"message":"write hello.txt: hello from the webhook"}'
    git clone http://demo:$API_KEY@%s/api/projects/%s/git demo && cat demo/hello.txt
    curl -s "%s/api/projects/%s/checkpoints/diff" -H "Authorization: Bearer $API_KEY"
    curl -s %s/api/projects/%s/checkpoints/graph -H "Authorization: Bearer $API_KEY"

  Web console: sign in as %s (owner of the demo workspace) with this one-time link (15 min):
    %s
  (a new link: apiserver admin user login-link --email %s --base-url %s)

`, a.cfg.DataDir, upstreamLine(a), ws.ID, keyPath, key, base, base, base, proj, base, proj, secret,
		base, proj, secret, addr, proj, base, proj, base, proj, u.Email, link, u.Email, base)
	return nil
}

// demoProject returns the demo workspace's project and its channel secret,
// creating both on first start (the secret is kept in <data dir>/demo-channel-secret).
func demoProject(ctx context.Context, a *app, workspaceID string) (string, string, error) {
	path := datadir.Demo(a.cfg.DataDir, "project")
	secretPath := datadir.Demo(a.cfg.DataDir, "channel-secret")
	pb, perr := os.ReadFile(path)
	sb, serr := os.ReadFile(secretPath)
	if perr == nil && serr == nil {
		return strings.TrimSpace(string(pb)), strings.TrimSpace(string(sb)), nil
	}
	p, err := a.store.CreateProject(ctx, workspaceID, "demo")
	if err != nil {
		return "", "", err
	}
	secret := store.NewID("hook")
	if _, err := a.store.SetChannel(ctx, p.ID, &secret, nil); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(secretPath, []byte(secret+"\n"), 0o600); err != nil {
		return "", "", err
	}
	return p.ID, secret, os.WriteFile(path, []byte(p.ID+"\n"), 0o600)
}

// upstreamLine says which upstream answers the models (the banner of make run).
func upstreamLine(a *app) string {
	if a.cat.HasDevProvider() {
		return "Models answer through the built-in dev upstream (no model behind replies); set SVC_UPSTREAM_BASE_URL for a real one."
	}
	var urls []string
	for _, name := range slices.Sorted(maps.Keys(a.cat.Providers)) {
		urls = append(urls, name+" → "+a.cat.Providers[name].BaseURL)
	}
	return "Models answer through " + strings.Join(urls, ", ") + "."
}
