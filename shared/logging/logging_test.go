package logging_test

import (
	"testing"

	"go.uber.org/zap/zapcore"

	"github.com/svc-dev/svc/shared/logging"
)

func TestNew(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		o       logging.Options
		wantErr bool
		// enabled is the lowest level the logger writes.
		enabled zapcore.Level
	}{
		{"defaults", logging.Options{}, false, zapcore.InfoLevel},
		{"json debug", logging.Options{Level: "debug", Format: "json"}, false, zapcore.DebugLevel},
		{"console warn", logging.Options{Level: "warn", Format: "console"}, false, zapcore.WarnLevel},
		{"unknown format", logging.Options{Format: "xml"}, true, 0},
		{"unknown level", logging.Options{Level: "loud"}, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			log, err := logging.New(tc.o)
			if (err != nil) != tc.wantErr {
				t.Fatalf("New(%+v) error = %v, want error: %v", tc.o, err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if !log.Core().Enabled(tc.enabled) || (tc.enabled > zapcore.DebugLevel && log.Core().Enabled(tc.enabled-1)) {
				t.Fatalf("New(%+v) does not log from %v exactly", tc.o, tc.enabled)
			}
		})
	}
}
