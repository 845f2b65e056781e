// Package cli is the opening the binaries' commands share: read the
// command's option table, build the logger its log options ask for, and
// exit 2 naming the command when either fails.
package cli

import (
	"fmt"
	"io"
	"os"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/logging"
	"github.com/svc-dev/svc/shared/settings"
)

// ExitUsage is the exit code of a command whose options (log settings
// included) are wrong.
const ExitUsage = 2

// stderr is where Start reports; tests swap it.
var stderr io.Writer = os.Stderr

// Start parses a command's options with parse and builds the logger from
// the log options logOf picks out of them. On either error it prints
// "<name>: <error>" to stderr and ok is false: the command exits ExitUsage.
func Start[C any](name string, parse func() (C, error), logOf func(C) logging.Options) (c C, log *zap.Logger, ok bool) {
	c, err := parse()
	if err == nil {
		log, err = logging.New(logOf(c))
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return c, nil, false
	}
	return c, log, true
}

// Serve is a server command's whole run: Start, then serve with the logger
// named after the command. It returns the exit code: ExitUsage when Start
// fails, 1 when serve fails (logged as "<name> failed"), else 0.
func Serve[C any](name string, parse func() (C, error), logOf func(C) logging.Options, serve func(C, *zap.Logger) error) int {
	c, log, ok := Start(name, parse, logOf)
	if !ok {
		return ExitUsage
	}
	defer log.Sync()
	if err := serve(c, log.Named(name)); err != nil {
		log.Error(name+" failed", zap.Error(err))
		return 1
	}
	return 0
}

// LogForeign logs at debug each variable of the environment that belongs to
// another program of the service (settings.CheckEnviron accepted it), so an
// operator who meant it for this one can see it was not read.
func LogForeign(log *zap.Logger, foreign []settings.Foreign) {
	for _, f := range foreign {
		log.Debug("environment variable of another program ignored", zap.String("variable", f.Name), zap.String("program", f.Program))
	}
}
