// Command apiserver is the stateless API server: the public chat-completions
// API (spec part A), the webhook agent-proxy (B) and the hydrate-only reads
// of cloud workspaces (C).
//
//	apiserver serve    HTTP server (migrates first, under a lock)
//	apiserver migrate  apply database migrations and exit
//	apiserver admin …  operator CLI, JSON on stdout
//	apiserver dev      serve on embedded defaults with a demo workspace (make run)
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/svc-dev/svc/apiserver/internal/admin"
	"github.com/svc-dev/svc/apiserver/internal/config"
	"github.com/svc-dev/svc/shared/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "apiserver:", err)
		if errors.Is(err, admin.ErrUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// run is the command line: one cobra verb per mode, each handed its
// arguments (the settings' flags, -flag or --flag; the admin CLI its own
// command words). No verb, an unknown one or -h of the binary is a usage
// error (exit 2).
func run(ctx context.Context, args []string) error {
	settingsHelp := config.Help()
	root := cli.Root("apiserver", "The stateless API server: public API, webhook agent-proxy, workspace reads and git.",
		cli.Verb("serve", "Serve HTTP (migrates first, under a lock).", settingsHelp,
			func(args []string) error { return serve(ctx, args, false) }),
		cli.Verb("dev", "Serve on embedded defaults with a demo workspace (make run).", settingsHelp,
			func(args []string) error { return serve(ctx, args, true) }),
		cli.Verb("migrate", "Apply database migrations and exit.", settingsHelp,
			func(args []string) error { return migrate(ctx, args) }),
		cli.Verb("admin", "Operator CLI: apiserver admin [settings flags] NOUN VERB [flags]; JSON on stdout.", settingsHelp,
			func(args []string) error { return runAdmin(ctx, args) }),
	)
	err := cli.Run(root, args, os.Stderr)
	if errors.Is(err, cli.ErrUsage) {
		return usageError{err}
	}
	return err
}

// usageError is a command-line error of the binary; it exits 2 like the
// admin CLI's (admin.ErrUsage).
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func (usageError) Is(target error) bool { return target == admin.ErrUsage }
