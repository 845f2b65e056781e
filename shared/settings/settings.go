// Package settings is the one option table of the service's binaries
// (docs/design.md §5, "Environment"): each setting is declared once with its
// flag, its environment variable, its default and whether it is a secret
// (secrets also accept <VAR>_FILE, for Kubernetes-mounted files). A flag given
// on the command line wins over the environment, the environment over the
// default. The apiserver, the podagent and the metal host declare their
// tables with it; the settings they share (logging, object storage) are
// declared here once.
package settings

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Option is one setting of a C.
type Option[C any] struct {
	Flag, Env, Def, Usage string
	Secret                bool
	// Set parses v (the flag, the environment or Def) into c.
	Set func(c *C, v string) error
}

// Parse fills c from args (flags named name in usage messages), then from
// getenv (nil: os.Getenv) for every option not given as a flag, then from
// defaults. It returns the flag set, for its usage text.
func Parse[C any](c *C, name string, args []string, getenv func(string) string, opts []Option[C]) (*flag.FlagSet, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s [flags]\n\nEvery flag is also read from its environment variable (a flag given wins):\n\n%s", name, Help(opts))
	}
	vals := make([]*string, len(opts))
	for i, o := range opts {
		usage := fmt.Sprintf("%s (env %s", o.Usage, o.Env)
		if o.Secret {
			usage += " or " + o.Env + "_FILE"
		}
		if o.Def != "" {
			usage += fmt.Sprintf(", default %q", o.Def)
		}
		vals[i] = fs.String(o.Flag, "", usage+")")
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for i, o := range opts {
		v, err := o.value(given[o.Flag], *vals[i], getenv)
		if err != nil {
			return nil, err
		}
		if err := o.Set(c, v); err != nil {
			return nil, fmt.Errorf("config: %s: %w", o.Env, err)
		}
	}
	return fs, nil
}

func (o Option[C]) value(flagGiven bool, flagVal string, getenv func(string) string) (string, error) {
	if flagGiven {
		return flagVal, nil
	}
	if v := getenv(o.Env); v != "" {
		return v, nil
	}
	if o.Secret {
		if path := getenv(o.Env + "_FILE"); path != "" {
			b, err := os.ReadFile(path)
			if err != nil {
				return "", fmt.Errorf("config: %s_FILE: %w", o.Env, err)
			}
			return strings.TrimSpace(string(b)), nil
		}
	}
	return o.Def, nil
}

// String stores the value as it is.
func String[C any](p func(*C) *string) func(*C, string) error {
	return func(c *C, v string) error { *p(c) = v; return nil }
}

// Bool parses strconv.ParseBool's words.
func Bool[C any](p func(*C) *bool) func(*C, string) error {
	return func(c *C, v string) (err error) { *p(c), err = strconv.ParseBool(v); return }
}

// Integer is the integer types a setting can have.
type Integer interface{ ~int | ~int64 }

// PositiveOr returns v, or def when v is zero or negative: the default of an
// optional count, size or duration of an options struct.
func PositiveOr[N Integer](v, def N) N {
	if v <= 0 {
		return def
	}
	return v
}

// Int parses a decimal integer.
func Int[C any, N Integer](p func(*C) *N) func(*C, string) error {
	return func(c *C, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		*p(c) = N(n)
		return err
	}
}

// PositiveInt parses a decimal integer of at least 1.
func PositiveInt[C any, N Integer](p func(*C) *N) func(*C, string) error {
	return func(c *C, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err == nil && n < 1 {
			err = errors.New("must be at least 1")
		}
		*p(c) = N(n)
		return err
	}
}

// Duration parses time.ParseDuration's syntax.
func Duration[C any](p func(*C) *time.Duration) func(*C, string) error {
	return func(c *C, v string) (err error) { *p(c), err = time.ParseDuration(v); return }
}

// PositiveDuration parses a duration above zero.
func PositiveDuration[C any](p func(*C) *time.Duration) func(*C, string) error {
	return func(c *C, v string) error {
		d, err := time.ParseDuration(v)
		if err == nil && d <= 0 {
			err = errors.New("must be positive")
		}
		*p(c) = d
		return err
	}
}
