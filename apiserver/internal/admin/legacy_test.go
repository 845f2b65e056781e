package admin

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strings"
	"testing"
)

// An older-style command (register with a flag.FlagSet, as on branches
// written before the cobra tree) still runs under its noun, with both flag
// spellings, and its required flag is still a usage error when missing.
func TestLegacyCommandStillRuns(t *testing.T) {
	register("legacyprobe echo", "--word W", func(_ context.Context, _ *Env, fs *flag.FlagSet, args []string) (any, error) {
		w := fs.String("word", "", "")
		if err := parse(fs, args, "word"); err != nil {
			return nil, err
		}
		return map[string]string{"word": *w}, nil
	})
	t.Cleanup(func() { delete(legacy, "legacyprobe echo") })
	for _, args := range [][]string{{"legacyprobe", "echo", "--word", "hi"}, {"legacyprobe", "echo", "-word=hi"}} {
		var out bytes.Buffer
		if err := Run(context.Background(), &Env{Out: &out}, args); err != nil || !strings.Contains(out.String(), `"word": "hi"`) {
			t.Fatalf("%v: %v %s", args, err, out.String())
		}
	}
	var out bytes.Buffer
	if err := Run(context.Background(), &Env{Out: &out}, []string{"legacyprobe", "echo"}); !errors.Is(err, ErrUsage) || out.Len() != 0 {
		t.Fatalf("missing --word: %v %s", err, out.String())
	}
	if !strings.Contains(Usage(), "legacyprobe echo") {
		t.Fatal("Usage does not list the older-style command")
	}
}
