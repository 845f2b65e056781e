package settings_test

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/logging"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/settings"
	"github.com/svc-dev/svc/shared/testenv/tabletest"
)

type conf struct {
	Name   string
	Secret string
	N      int
	Big    int64
	Wait   time.Duration
	On     bool
	Log    logging.Options
	Store  objstore.Config
}

func options() []settings.Option[conf] {
	return append(append([]settings.Option[conf]{
		{Flag: "name", Env: "T_NAME", Def: "dflt", Usage: "a name", Set: settings.String(func(c *conf) *string { return &c.Name })},
		{Flag: "secret", Env: "T_SECRET", Secret: true, Usage: "a secret", Set: settings.String(func(c *conf) *string { return &c.Secret })},
		{Flag: "n", Env: "T_N", Def: "3", Usage: "a count", Set: settings.PositiveInt(func(c *conf) *int { return &c.N })},
		{Flag: "big", Env: "T_BIG", Def: "0", Usage: "a size", Set: settings.Int(func(c *conf) *int64 { return &c.Big })},
		{Flag: "wait", Env: "T_WAIT", Def: "1s", Usage: "a wait", Set: settings.PositiveDuration(func(c *conf) *time.Duration { return &c.Wait })},
		{Flag: "on", Env: "T_ON", Def: "false", Usage: "a switch", Set: settings.Bool(func(c *conf) *bool { return &c.On })},
	}, settings.LogOptions(func(c *conf) *logging.Options { return &c.Log })...),
		settings.StorageOptions(func(c *conf) *objstore.Config { return &c.Store })...)
}

func TestParse(t *testing.T) {
	t.Parallel()
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		want    func(c conf) bool
		wantErr string
	}{
		{name: "defaults", want: func(c conf) bool {
			return c.Name == "dflt" && c.N == 3 && c.Wait == time.Second && !c.On && c.Log.Level == "info" &&
				c.Log.Format == "json" && c.Store.Backend == "fs" && c.Store.Bucket == "svc"
		}},
		{name: "env over default", env: map[string]string{"T_NAME": "env", "T_BIG": "5000000000", "SVC_STORAGE": "s3", "SVC_S3_USE_SSL": "true", "SVC_LOG_FORMAT": "console"},
			want: func(c conf) bool {
				return c.Name == "env" && c.Big == 5000000000 && c.Store.Backend == "s3" && c.Store.UseSSL && c.Log.Format == "console"
			}},
		{name: "flag over env", args: []string{"-name", "flag", "--n", "7"}, env: map[string]string{"T_NAME": "env", "T_N": "2"},
			want: func(c conf) bool { return c.Name == "flag" && c.N == 7 }},
		{name: "secret file", env: map[string]string{"T_SECRET_FILE": secretFile}, want: func(c conf) bool { return c.Secret == "from-file" }},
		{name: "secret env over file", env: map[string]string{"T_SECRET": "env", "T_SECRET_FILE": secretFile}, want: func(c conf) bool { return c.Secret == "env" }},
		{name: "no _FILE for a plain setting", env: map[string]string{"T_NAME_FILE": secretFile}, want: func(c conf) bool { return c.Name == "dflt" }},
		{name: "missing secret file", env: map[string]string{"T_SECRET_FILE": "/nonexistent/x"}, wantErr: "config: T_SECRET_FILE"},
		{name: "zero count", env: map[string]string{"T_N": "0"}, wantErr: "config: T_N: must be at least 1"},
		{name: "negative wait", env: map[string]string{"T_WAIT": "-1s"}, wantErr: "config: T_WAIT: must be positive"},
		{name: "bad bool", env: map[string]string{"T_ON": "maybe"}, wantErr: "config: T_ON"},
		{name: "bad log format", env: map[string]string{"SVC_LOG_FORMAT": "xml"}, wantErr: "SVC_LOG_FORMAT"},
		{name: "unknown flag", args: []string{"-nope"}, wantErr: "nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var c conf
			_, err := settings.Parse(&c, "t", tc.args, func(k string) string { return tc.env[k] }, options())
			tabletest.Check(t, c, err, tc.wantErr, tc.want)
		})
	}
}

// The usage text names the env var, the _FILE variant of secrets and the
// default.
func TestUsage(t *testing.T) {
	t.Parallel()
	var c conf
	fs, err := settings.Parse(&c, "t", nil, func(string) string { return "" }, options())
	if err != nil {
		t.Fatal(err)
	}
	if u := fs.Lookup("secret").Usage; u != "a secret (env T_SECRET or T_SECRET_FILE)" {
		t.Errorf("secret usage %q", u)
	}
	if u := fs.Lookup("n").Usage; u != `a count (env T_N, default "3")` {
		t.Errorf("n usage %q", u)
	}
}

// PositiveOr keeps a positive value and replaces zero and negatives by the
// default.
func TestPositiveOr(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ v, def, want time.Duration }{
		{time.Second, time.Minute, time.Second},
		{0, time.Minute, time.Minute},
		{-time.Second, time.Minute, time.Minute},
	} {
		if got := settings.PositiveOr(tc.v, tc.def); got != tc.want {
			t.Errorf("PositiveOr(%v, %v) = %v, want %v", tc.v, tc.def, got, tc.want)
		}
	}
	if got := settings.PositiveOr(0, 3); got != 3 {
		t.Errorf("PositiveOr(0, 3) = %d", got)
	}
}

// Help lists every setting with its flag, its variable (a secret's _FILE
// too) and its default, and -h prints it.
func TestHelp(t *testing.T) {
	t.Parallel()
	h := settings.Help(options())
	for _, w := range []string{"--name", "T_NAME", "dflt", "--secret", "T_SECRET or T_SECRET_FILE", "--s3-bucket", "SVC_S3_BUCKET", "SVC_LOG_LEVEL"} {
		if !strings.Contains(h, w) {
			t.Errorf("Help lacks %q:\n%s", w, h)
		}
	}
	if n := strings.Count(h, "\n"); n != len(options())+1 {
		t.Errorf("Help has %d lines, want a header and one per setting (%d)", n, len(options()))
	}
	var c conf
	fs, err := settings.Parse(&c, "t", []string{"-h"}, func(string) string { return "" }, options())
	if !errors.Is(err, flag.ErrHelp) || fs != nil {
		t.Fatalf("Parse -h = %v, %v; want flag.ErrHelp", fs, err)
	}
}
