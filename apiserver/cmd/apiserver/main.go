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

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: apiserver serve|migrate|admin|dev [flags]", admin.ErrUsage)
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], false)
	case "dev":
		return serve(ctx, args[1:], true)
	case "migrate":
		return migrate(ctx, args[1:])
	case "admin":
		return runAdmin(ctx, args[1:])
	}
	return fmt.Errorf("%w: unknown command %q (serve, migrate, admin, dev)", admin.ErrUsage, args[0])
}
