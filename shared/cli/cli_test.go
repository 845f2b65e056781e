package cli

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/svc-dev/svc/shared/logging"
	"github.com/svc-dev/svc/shared/settings"
)

type conf struct{ Log logging.Options }

func logOf(c conf) logging.Options { return c.Log }

// The exit code and what stderr says for each way a command's opening ends.
// Not parallel: the cases share the package's stderr.
func TestServe(t *testing.T) {
	t.Cleanup(func() { stderr = os.Stderr })
	served := errors.New("port taken")
	for _, tc := range []struct {
		name     string
		parse    func() (conf, error)
		serveErr error
		code     int
		stderr   string
		served   bool
	}{
		{name: "options refused", parse: func() (conf, error) { return conf{}, errors.New("--x: bad value") },
			code: ExitUsage, stderr: "cmd: --x: bad value\n"},
		{name: "log format refused", parse: func() (conf, error) { return conf{Log: logging.Options{Format: "xml"}}, nil },
			code: ExitUsage, stderr: "cmd: log format \"xml\": choose json or console\n"},
		{name: "serve fails", parse: func() (conf, error) { return conf{}, nil }, serveErr: served, code: 1, served: true},
		{name: "serve ends", parse: func() (conf, error) { return conf{}, nil }, code: 0, served: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			stderr = &out
			called := false
			code := Serve("cmd", tc.parse, logOf, func(_ conf, log *zap.Logger) error {
				called = true
				if log == nil {
					t.Error("serve got no logger")
				}
				return tc.serveErr
			})
			if code != tc.code || out.String() != tc.stderr || called != tc.served {
				t.Errorf("code %d, stderr %q, served %v; want %d, %q, %v", code, out.String(), called, tc.code, tc.stderr, tc.served)
			}
		})
	}
}

// Other programs' variables are logged at debug, one line each, naming the
// variable and its program.
func TestLogForeign(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.DebugLevel)
	LogForeign(zap.New(core), []settings.Foreign{{Name: "SVC_DATABASE_URL", Program: "apiserver"}, {Name: "SVC_BIN_DIR", Program: "the test harness"}})
	got := logs.All()
	if len(got) != 2 || got[0].Level != zap.DebugLevel || got[0].ContextMap()["variable"] != "SVC_DATABASE_URL" ||
		got[0].ContextMap()["program"] != "apiserver" || got[1].ContextMap()["variable"] != "SVC_BIN_DIR" {
		t.Fatalf("logged %+v", got)
	}
}
