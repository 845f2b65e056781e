// Package admin is the operator CLI (`apiserver admin <noun> <verb>`,
// docs/design.md §5 "Admin CLI"): each command prints one JSON object on
// stdout. It talks to the database directly, so it works without a running
// server.
//
// The commands are a cobra tree (as kubectl's and helm's), one file per
// noun: workspace.go, user.go, key.go, project.go, channel.go, usage.go,
// lfs.go, parity.go, pairing.go (pairing and runtime). A command's RunE
// answers with the value to print; Run prints it. Tests: one table row per
// command in admin_test.go.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/objstore"
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

// ErrUsage is returned for unknown commands and bad flags.
var ErrUsage = errors.New("admin: usage")

// groups are the command nouns, one file each; a new noun is one line here.
var groups = []func(*cli) []*cobra.Command{
	(*cli).workspaceCommands,
	(*cli).userCommands,
	(*cli).memberCommands,
	(*cli).keyCommands,
	(*cli).projectCommands,
	(*cli).channelCommands,
	(*cli).usageCommands,
	(*cli).lfsCommands,
	(*cli).parityCommands,
	(*cli).pairingCommands,
	(*cli).runtimeCommands,
}

// cli is one invocation: the environment and the answer of the command
// that ran.
type cli struct {
	env *Env
	out any
	ran bool
}

// Run executes one command, e.g. args = ["key", "create", "--workspace", "ws_…"].
func Run(ctx context.Context, env *Env, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w\n%s", ErrUsage, Usage())
	}
	a := &cli{env: env}
	root := a.root()
	root.SetArgs(args)
	if _, err := root.ExecuteContextC(ctx); err != nil {
		if !errors.Is(err, ErrUsage) && isUsageError(err) {
			err = fmt.Errorf("%w: %v\n%s", ErrUsage, err, Usage())
		}
		return err
	}
	if !a.ran { // --help, or a noun without its verb
		return fmt.Errorf("%w\n%s", ErrUsage, Usage())
	}
	enc := json.NewEncoder(env.Out)
	enc.SetIndent("", "  ")
	if err := enc.Encode(a.out); err != nil {
		return err
	}
	// A command whose answer is a failure (parity-check mismatches, a
	// refused cohort) exits non-zero after printing it.
	if f, ok := a.out.(interface{ Failed() error }); ok {
		return f.Failed()
	}
	return nil
}

// isUsageError: cobra's own errors (unknown command, unexpected argument).
func isUsageError(err error) bool {
	m := err.Error()
	return strings.HasPrefix(m, "unknown command") || strings.Contains(m, "accepts 0 arg") ||
		strings.HasPrefix(m, "unknown flag") || strings.HasPrefix(m, "unknown shorthand flag")
}

// root is the command tree of one invocation.
func (a *cli) root() *cobra.Command {
	root := &cobra.Command{Use: "admin", SilenceErrors: true, SilenceUsage: true}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return fmt.Errorf("%w: %v", ErrUsage, err) })
	nouns := map[string]*cobra.Command{}
	add := func(c *cobra.Command) {
		if n, ok := nouns[c.Name()]; ok {
			n.AddCommand(c.Commands()...)
			return
		}
		nouns[c.Name()] = c
		root.AddCommand(c)
	}
	for _, g := range groups {
		for _, c := range g(a) {
			add(c)
		}
	}
	return root
}

// noun is a command group: run alone, or with an unknown verb, it is a
// usage error.
func noun(name string, verbs ...*cobra.Command) *cobra.Command {
	n := &cobra.Command{Use: name, Args: cobra.ArbitraryArgs, RunE: func(c *cobra.Command, args []string) error {
		return fmt.Errorf("%w: unknown command %q", ErrUsage, strings.TrimSpace(strings.TrimPrefix(c.CommandPath(), "admin")+" "+strings.Join(args, " ")))
	}}
	n.AddCommand(verbs...)
	return n
}

// verb is one command: usage is its flags' synopsis (Usage lists it),
// required the flags that must be given a non-empty value, run its answer.
func (a *cli) verb(use, usage string, required []string, run func(ctx context.Context, c *cobra.Command) (any, error)) *cobra.Command {
	return &cobra.Command{Use: use, Short: usage, Args: cobra.NoArgs, RunE: func(c *cobra.Command, _ []string) error {
		for _, r := range required {
			if f := c.Flags().Lookup(r); f == nil || f.Value.String() == "" {
				return fmt.Errorf("%w: --%s is required", ErrUsage, r)
			}
		}
		out, err := run(c.Context(), c)
		if err != nil {
			return err
		}
		a.out, a.ran = out, true
		return nil
	}}
}

// Usage lists the commands.
func Usage() string {
	var lines []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if !c.HasSubCommands() {
			lines = append(lines, fmt.Sprintf("  %-24s %s", strings.TrimPrefix(c.CommandPath(), "admin "), c.Short))
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	for _, c := range (&cli{env: &Env{}}).root().Commands() {
		walk(c)
	}
	sort.Strings(lines)
	return "usage: apiserver admin <command> [flags]\n\ncommands:\n" + strings.Join(lines, "\n") + "\n"
}
