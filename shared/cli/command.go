package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// ErrUsage is what Run returns, wrapped with the reason, when no verb ran:
// none was given, it is unknown (cobra's message suggests the nearest), or
// -h was asked of the binary itself. The binaries exit ExitUsage on it.
var ErrUsage = errors.New("usage")

// Verb is a command of a binary whose flags are an option table of
// shared/settings: cobra routes to it and hands it every argument, and run
// parses them with settings.Parse, so a flag is -name or --name as before
// and -h prints every setting with its variable and default (settings.Help,
// which the cobra help of the verb shows too).
func Verb(use, short, settingsHelp string, run func(args []string) error) *cobra.Command {
	long := short
	if settingsHelp != "" {
		long += "\n\nEvery flag is also read from its environment variable (a flag given wins):\n\n" + settingsHelp
	}
	return &cobra.Command{Use: use, Short: short, Long: long, DisableFlagParsing: true,
		RunE: func(_ *cobra.Command, args []string) error { return run(args) }}
}

// Root is a binary's command: its verbs below it, no flags of its own.
func Root(use, short string, verbs ...*cobra.Command) *cobra.Command {
	root := &cobra.Command{Use: use, Short: short, SilenceErrors: true, SilenceUsage: true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true}}
	root.AddCommand(verbs...)
	return root
}

// Run executes root with args. A verb's own error is returned as it is.
// When no verb ran, the help cobra wrote (the binary's, or a verb's for
// `help VERB`), else the binary's usage, goes to out and the error wraps
// ErrUsage.
func Run(root *cobra.Command, args []string, out io.Writer) error {
	ran := false
	for _, c := range root.Commands() {
		if run := c.RunE; run != nil {
			c.RunE = func(c *cobra.Command, args []string) error { ran = true; return run(c, args) }
		}
	}
	var help bytes.Buffer
	root.SetOut(&help)
	root.SetErr(&help)
	root.SetArgs(args)
	err := root.Execute()
	if ran {
		return err
	}
	if err == nil || errors.Is(err, flag.ErrHelp) {
		err = errors.New("no command given")
	}
	text := help.String()
	if strings.TrimSpace(text) == "" {
		text = root.UsageString()
	}
	fmt.Fprint(out, text)
	return fmt.Errorf("%w: %v", ErrUsage, err)
}
