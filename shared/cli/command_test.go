package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// Each way a binary's command line ends: a verb runs with every argument
// (flags included, left to its option table), its error comes back as it
// is; no verb, an unknown verb (with cobra's suggestion) and -h of the
// binary are usage errors that print the binary's help; `help VERB` prints
// the verb's settings.
func TestRun(t *testing.T) {
	t.Parallel()
	failed := errors.New("port taken")
	for _, tc := range []struct {
		name     string
		args     []string
		wantArgs string // the serve verb's arguments; "-" when it must not run
		wantErr  error
		wantOut  []string
	}{
		{name: "verb with flags", args: []string{"serve", "-http-addr", ":1", "--log-level=debug", "-h"}, wantArgs: "-http-addr :1 --log-level=debug -h"},
		{name: "verb fails", args: []string{"serve", "fail"}, wantArgs: "fail", wantErr: failed},
		{name: "no verb", args: nil, wantArgs: "-", wantErr: ErrUsage, wantOut: []string{"Available Commands:", "serve", "migrate"}},
		{name: "unknown verb", args: []string{"serv"}, wantArgs: "-", wantErr: ErrUsage, wantOut: []string{"serve"}},
		{name: "help of the binary", args: []string{"--help"}, wantArgs: "-", wantErr: ErrUsage, wantOut: []string{"Available Commands:"}},
		{name: "help of a verb", args: []string{"help", "serve"}, wantArgs: "-", wantErr: ErrUsage,
			wantOut: []string{"the HTTP server", "SVC_HTTP_ADDR"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := "-"
			serve := Verb("serve", "the HTTP server", "  --http-addr  SVC_HTTP_ADDR  :8080  listen address\n", func(args []string) error {
				got = strings.Join(args, " ")
				if got == "fail" {
					return failed
				}
				return nil
			})
			migrate := Verb("migrate", "apply migrations", "", func([]string) error { return nil })
			var out bytes.Buffer
			err := Run(Root("bin", "a binary", serve, migrate), tc.args, &out)
			if got != tc.wantArgs || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("ran serve with %q, error %v; want %q, %v", got, err, tc.wantArgs, tc.wantErr)
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			if tc.name == "unknown verb" && !strings.Contains(err.Error(), `unknown command "serv"`) {
				t.Errorf("error %v does not name the unknown verb", err)
			}
		})
	}
}
