package admin

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"
)

// Older-style commands: a function over a flag.FlagSet, registered by name
// from an init(). They still run (their flags are parsed by the standard
// flag package, so -name and --name both work), but new commands are cobra
// verbs in their noun's file. To port one:
//
//  1. move its body into the noun's file as a.verb("<verb>", usage,
//     required, func(ctx, c) (any, error) {…}) and declare each flag with
//     c.Flags().StringVar/BoolVar/DurationVar on variables the body reads;
//  2. replace fs.Visit checks for "was it given" with c.Flags().Changed;
//  3. delete the register call, and add a test row to admin_test.go.
var legacy = map[string]legacyCommand{}

type legacyCommand struct {
	usage string
	run   func(ctx context.Context, env *Env, fs *flag.FlagSet, args []string) (any, error)
}

// register adds an older-style command, e.g. name "pairing create".
func register(name, usage string, run func(ctx context.Context, env *Env, fs *flag.FlagSet, args []string) (any, error)) {
	legacy[name] = legacyCommand{usage: usage, run: run}
}

// registerOne registers an older-style command whose only flag is one
// required string flag, --<name>; run gets its value.
func registerOne(name, usage, flagName string, run func(ctx context.Context, env *Env, value string) (any, error)) {
	register(name, usage, func(ctx context.Context, env *Env, fs *flag.FlagSet, args []string) (any, error) {
		v := fs.String(flagName, "", "")
		if err := parse(fs, args, flagName); err != nil {
			return nil, err
		}
		return run(ctx, env, *v)
	})
}

// parse parses an older-style command's flags and checks the required ones.
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

// legacyCommands are the registered older-style commands as cobra
// commands (one-word names at the top, two-word names under their noun).
func (a *cli) legacyCommands() []*cobra.Command {
	names := make([]string, 0, len(legacy))
	for n := range legacy {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []*cobra.Command
	for _, name := range names {
		l := legacy[name]
		nounName, verbName, two := strings.Cut(name, " ")
		if !two {
			verbName = nounName
		}
		c := &cobra.Command{Use: verbName, Short: l.usage, DisableFlagParsing: true, RunE: func(c *cobra.Command, args []string) error {
			fs := flag.NewFlagSet(name, flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			out, err := l.run(c.Context(), a.env, fs, args)
			if err != nil {
				return err
			}
			a.out, a.ran = out, true
			return nil
		}}
		if two {
			c = noun(nounName, c)
		}
		out = append(out, c)
	}
	return out
}
