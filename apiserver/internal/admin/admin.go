// Package admin is the operator CLI (`apiserver admin <noun> <verb>`,
// docs/design.md §5): each command prints one JSON object on stdout. It talks to
// the database directly, so it works without a running server.
package admin

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/apikey"
	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/lfsgc"
	"github.com/svc-dev/svc/apiserver/internal/parity"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/runtimetoken"
	"github.com/svc-dev/svc/shared/syncmode"
)

// Env is what commands run against.
type Env struct {
	Store         *store.Store
	Catalog       *catalog.Catalog
	RuntimeSecret []byte
	Out           io.Writer
	// In is where commands read secrets from (user set-password).
	In io.Reader
	// PublicURL is the server's external base URL (console sign-in links).
	PublicURL string
	// Publish calls a pod's git-flush with a publish tag; nil when the
	// publish package is not wired.
	Publish func(ctx context.Context, podURL, token, subdomain string, now time.Time) (sha, tag string, err error)
	// Objects opens the object store (parity-check reads project-src
	// heads); nil skips what needs it.
	Objects func(ctx context.Context) (objstore.Store, error)
	// Log receives per-object lines of lfs gc (nil: none).
	Log *zap.Logger
}

type command struct {
	usage string
	run   func(ctx context.Context, env *Env, fs *flag.FlagSet, args []string) (any, error)
}

var commands = map[string]command{}

func register(name, usage string, run func(ctx context.Context, env *Env, fs *flag.FlagSet, args []string) (any, error)) {
	commands[name] = command{usage: usage, run: run}
}

// Usage lists the commands.
func Usage() string {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("usage: apiserver admin <command> [flags]\n\ncommands:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %-24s %s\n", n, commands[n].usage)
	}
	return b.String()
}

// ErrUsage is returned for unknown commands and bad flags.
var ErrUsage = errors.New("admin: usage")

// Run executes one command, e.g. args = ["key", "create", "--workspace", "ws_…"].
func Run(ctx context.Context, env *Env, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w\n%s", ErrUsage, Usage())
	}
	// Commands are one word (parity-check) or two (key create).
	name, rest := args[0], args[1:]
	cmd, ok := commands[name]
	if !ok && len(args) > 1 {
		name, rest = args[0]+" "+args[1], args[2:]
		cmd, ok = commands[name]
	}
	if !ok {
		return fmt.Errorf("%w: unknown command %q\n%s", ErrUsage, strings.Join(args[:min(2, len(args))], " "), Usage())
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	out, err := cmd.run(ctx, env, fs, rest)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(env.Out)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return err
	}
	// A command whose answer is a failure (parity-check mismatches, a
	// refused cohort) exits non-zero after printing it.
	if f, ok := out.(interface{ Failed() error }); ok {
		return f.Failed()
	}
	return nil
}

func parse(fs *flag.FlagSet, args []string, required ...string) error {
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	for _, r := range required {
		if f := fs.Lookup(r); f == nil || f.Value.String() == "" {
			return fmt.Errorf("%w: --%s is required", ErrUsage, r)
		}
	}
	return nil
}

// registerOne registers a command whose only flag is one required string
// flag, --<name>; run gets its value.
func registerOne(name, usage, flagName string, run func(ctx context.Context, env *Env, value string) (any, error)) {
	register(name, usage, func(ctx context.Context, env *Env, fs *flag.FlagSet, args []string) (any, error) {
		v := fs.String(flagName, "", "")
		if err := parse(fs, args, flagName); err != nil {
			return nil, err
		}
		return run(ctx, env, *v)
	})
}

func init() {
	register("workspace create", "--name N [--plan P]", func(ctx context.Context, env *Env, fs *flag.FlagSet, args []string) (any, error) {
		name, plan := fs.String("name", "", ""), fs.String("plan", "free", "")
		if err := parse(fs, args, "name"); err != nil {
			return nil, err
		}
		if _, ok := env.Catalog.Plan(*plan); !ok {
			return nil, fmt.Errorf("unknown plan %q", *plan)
		}
		return env.Store.CreateWorkspace(ctx, *name, *plan)
	})
	register("workspace set", "--id W [--plan P] [--usage-based-pricing=true|false]", func(ctx context.Context, env *Env, fs *flag.FlagSet, args []string) (any, error) {
		id, plan, ubp := fs.String("id", "", ""), fs.String("plan", "", ""), fs.String("usage-based-pricing", "", "")
		if err := parse(fs, args, "id"); err != nil {
			return nil, err
		}
		var planP *string
		if *plan != "" {
			if _, ok := env.Catalog.Plan(*plan); !ok {
				return nil, fmt.Errorf("unknown plan %q", *plan)
			}
			planP = plan
		}
		var ubpP *bool
		switch *ubp {
		case "":
		case "true", "false":
			v := *ubp == "true"
			ubpP = &v
		default:
			return nil, fmt.Errorf("%w: --usage-based-pricing must be true or false", ErrUsage)
		}
		return env.Store.UpdateWorkspace(ctx, *id, planP, ubpP)
	})
	registerOne("user create", "--email E", "email", func(ctx context.Context, env *Env, email string) (any, error) {
		return env.Store.CreateUser(ctx, email)
	})
	register("member add", "--workspace W --user U [--role owner|member]", func(ctx context.Context, env *Env, fs *flag.FlagSet, args []string) (any, error) {
		ws, user, role := fs.String("workspace", "", ""), fs.String("user", "", ""), fs.String("role", "", "")
		if err := parse(fs, args, "workspace", "user"); err != nil {
			return nil, err
		}
		if *role == "" {
			return env.Store.AddMember(ctx, *ws, *user)
		}
		if !store.ValidRole(*role) {
			return nil, fmt.Errorf("%w: --role must be owner or member", ErrUsage)
		}
		return env.Store.SetMember(ctx, *ws, *user, *role)
	})
	register("key create", "--workspace W --user U [--name N]  (prints the plain key once)", func(ctx context.Context, env *Env, fs *flag.FlagSet, args []string) (any, error) {
		ws, user, name := fs.String("workspace", "", ""), fs.String("user", "", ""), fs.String("name", "", "")
		if err := parse(fs, args, "workspace", "user"); err != nil {
			return nil, err
		}
		return apikey.Issue(ctx, env.Store, *ws, *user, *name)
	})
	registerOne("key revoke", "--id K", "id", func(ctx context.Context, env *Env, id string) (any, error) {
		return env.Store.RevokeAPIKey(ctx, id)
	})
	register("project create", "--workspace W --name N", func(ctx context.Context, env *Env, fs *flag.FlagSet, args []string) (any, error) {
		ws, name := fs.String("workspace", "", ""), fs.String("name", "", "")
		if err := parse(fs, args, "workspace", "name"); err != nil {
			return nil, err
		}
		return env.Store.CreateProject(ctx, *ws, *name)
	})
	registerOne("project show", "--id P", "id", func(ctx context.Context, env *Env, id string) (any, error) {
		p, err := env.Store.GetProject(ctx, id)
		if err != nil {
			return nil, err
		}
		// The channel's id is what the outbox poll needs (empty: no channel yet).
		out := struct {
			store.Project
			ChannelID string `json:"channelId"`
		}{Project: p}
		if ch, err := env.Store.GetChannel(ctx, id); err == nil {
			out.ChannelID = ch.ID
		}
		return out, nil
	})
	register("project set-sync-mode", "--id P --mode s3|dual_shadow|git_only [--force] [--restart]  (dual_shadow cohort: at most 10 projects, 7 days)", func(ctx context.Context, env *Env, fs *flag.FlagSet, args []string) (any, error) {
		id, mode, force := fs.String("id", "", ""), fs.String("mode", "", ""), fs.Bool("force", false, "")
		restart := fs.Bool("restart", false, "")
		if err := parse(fs, args, "id", "mode"); err != nil {
			return nil, err
		}
		m, err := syncmode.Parse(*mode)
		if err != nil || *mode == "" {
			return nil, fmt.Errorf("%w: --mode must be s3, dual_shadow or git_only", ErrUsage)
		}
		p, err := SetSyncMode(ctx, env.Store, *id, m, *force, time.Now())
		if err != nil || !*restart {
			return p, err
		}
		// Spec 3.1: the mode applies at the next pod assignment; --restart
		// asks for that assignment now.
		if _, err := env.Store.RestartRuntime(ctx, *id); err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		return p, nil
	})
	registerOne("project restart", "--id P", "id", func(ctx context.Context, env *Env, id string) (any, error) {
		if _, err := env.Store.GetProject(ctx, id); err != nil {
			return nil, err
		}
		// The next request replaces the runtime (kubernetes: the next pod
		// generation, with the project's current sync mode); the replaced
		// pod stops gracefully first.
		a, err := env.Store.RestartRuntime(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return map[string]any{"projectId": id, "restarted": false, "reason": "the project has no runtime yet"}, nil
		}
		if err != nil {
			return nil, err
		}
		return map[string]any{"projectId": id, "restarted": a.Driver != store.DriverPaired, "driver": a.Driver,
			"generation": a.Generation}, nil
	})
	registerOne("project runtime-token", "--id P", "id", func(ctx context.Context, env *Env, id string) (any, error) {
		if len(env.RuntimeSecret) == 0 {
			return nil, errors.New("SVC_RUNTIME_AUTH_SECRET is not set")
		}
		if _, err := env.Store.GetProject(ctx, id); err != nil {
			return nil, err
		}
		return map[string]string{"token": runtimetoken.Mint(env.RuntimeSecret, id)}, nil
	})
	register("project publish", "--id P --subdomain S [--pod-url U]", func(ctx context.Context, env *Env, fs *flag.FlagSet, args []string) (any, error) {
		id, sub, podURL := fs.String("id", "", ""), fs.String("subdomain", "", ""), fs.String("pod-url", "", "")
		if err := parse(fs, args, "id", "subdomain"); err != nil {
			return nil, err
		}
		if env.Publish == nil {
			return nil, errors.New("publish is not available in this build")
		}
		if len(env.RuntimeSecret) == 0 {
			return nil, errors.New("SVC_RUNTIME_AUTH_SECRET is not set")
		}
		if _, err := env.Store.GetProject(ctx, *id); err != nil {
			return nil, err
		}
		if *podURL == "" {
			// The agent the project is pinned to (local or kubernetes driver).
			a, err := env.Store.GetRuntimeAssignment(ctx, *id)
			if err != nil || a.Endpoint == "" || a.Driver == store.DriverPaired {
				return nil, fmt.Errorf("%w: the project has no running agent to publish from; send it a webhook message first or pass --pod-url", ErrUsage)
			}
			*podURL = a.Endpoint
		}
		sha, tag, err := env.Publish(ctx, *podURL, runtimetoken.Mint(env.RuntimeSecret, *id), *sub, time.Now())
		if err != nil {
			return nil, err
		}
		if _, err := env.Store.SetPublished(ctx, *id, sha, tag); err != nil {
			return nil, err
		}
		return map[string]string{"sha": sha, "tag": tag}, nil
	})
	register("channel set", "--project P [--secret S | --generate-secret] [--callback-headers JSON]", func(ctx context.Context, env *Env, fs *flag.FlagSet, args []string) (any, error) {
		project, secret, headers := fs.String("project", "", ""), fs.String("secret", "", ""), fs.String("callback-headers", "", "")
		generate := fs.Bool("generate-secret", false, "")
		if err := parse(fs, args, "project"); err != nil {
			return nil, err
		}
		var secretP, headersP *string
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "secret":
				secretP = secret
			case "callback-headers":
				headersP = headers
			}
		})
		if headersP != nil {
			var m map[string]string
			if err := json.Unmarshal([]byte(*headersP), &m); err != nil {
				return nil, fmt.Errorf("%w: --callback-headers must be a JSON object of strings", ErrUsage)
			}
		}
		if *generate && secretP != nil {
			return nil, fmt.Errorf("%w: --secret and --generate-secret exclude each other", ErrUsage)
		}
		if _, err := env.Store.GetProject(ctx, *project); err != nil {
			return nil, err
		}
		if !*generate && secretP == nil {
			// A channel without a secret rejects every request: a new one
			// gets a generated secret by default.
			existing, err := env.Store.GetChannel(ctx, *project)
			if errors.Is(err, store.ErrNotFound) || (err == nil && existing.Secret == "") {
				*generate = true
			} else if err != nil {
				return nil, err
			}
		}
		if *generate {
			s, err := GenerateChannelSecret()
			if err != nil {
				return nil, err
			}
			secretP = &s
		}
		ch, err := env.Store.SetChannel(ctx, *project, secretP, headersP)
		if err != nil {
			return nil, err
		}
		out := map[string]any{"channelId": ch.ID, "projectId": ch.ProjectID, "hasSecret": ch.Secret != "",
			"callbackHeaders": json.RawMessage(ch.CallbackHeaders)}
		if *generate {
			out["secret"] = ch.Secret // shown once, like a new API key
		}
		return out, nil
	})
	registerOne("usage show", "--workspace W", "workspace", func(ctx context.Context, env *Env, ws string) (any, error) {
		return ShowUsage(ctx, env, ws)
	})
	register("lfs gc", "--project P [--dry-run] [--grace 168h]  (delete large-file objects no ref or tag reaches, spec 10.3)", func(ctx context.Context, env *Env, fs *flag.FlagSet, args []string) (any, error) {
		id, dry, grace := fs.String("project", "", ""), fs.Bool("dry-run", false, ""), fs.Duration("grace", lfsgc.DefaultGrace, "")
		if err := parse(fs, args, "project"); err != nil {
			return nil, err
		}
		if *grace < time.Hour {
			return nil, fmt.Errorf("%w: --grace must be at least 1h (an in-flight push must never be collected)", ErrUsage)
		}
		if _, err := env.Store.GetProject(ctx, *id); err != nil {
			return nil, err
		}
		if env.Objects == nil {
			return nil, errors.New("lfs gc needs the object store")
		}
		objs, err := env.Objects(ctx)
		if err != nil {
			return nil, err
		}
		return (&lfsgc.GC{Objects: objs, Grace: *grace, Log: env.Log}).Project(ctx, *id, *dry)
	})
	register("parity-check", "[--project P] [--since 24h]  (one checkpoint row per turn, spec 10.6.4; exit 1 on a mismatch)", func(ctx context.Context, env *Env, fs *flag.FlagSet, args []string) (any, error) {
		id, since := fs.String("project", "", ""), fs.Duration("since", 24*time.Hour, "")
		if err := parse(fs, args); err != nil {
			return nil, err
		}
		c := &parity.Checker{Store: env.Store}
		if env.Objects != nil {
			objs, err := env.Objects(ctx)
			if err != nil {
				return nil, err
			}
			c.Objects = objs
		}
		return c.Run(ctx, *id, *since)
	})
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
