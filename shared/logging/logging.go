// Package logging builds the zap logger every binary uses: JSON in
// production, console when SVC_LOG_FORMAT=console (both settings are
// declared in shared/settings). Components name their logger
// (logger.Named("gitsync")) and never log a secret.
package logging

import (
	"fmt"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Options are the SVC_LOG_LEVEL and SVC_LOG_FORMAT settings.
type Options struct {
	// Level is debug, info, warn or error (empty: info).
	Level string
	// Format is json (or empty) or console.
	Format string
}

// ValidFormat reports a format New does not know.
func ValidFormat(f string) error {
	switch f {
	case "", "json", "console":
		return nil
	}
	return fmt.Errorf("log format %q: choose json or console", f)
}

// New returns a logger at o.Level in o.Format.
func New(o Options) (*zap.Logger, error) {
	if err := ValidFormat(o.Format); err != nil {
		return nil, err
	}
	cfg := zap.NewProductionConfig()
	if o.Format == "console" {
		cfg = zap.NewDevelopmentConfig()
	}
	cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	cfg.Sampling = nil
	if o.Level != "" {
		lvl, err := zapcore.ParseLevel(o.Level)
		if err != nil {
			return nil, err
		}
		cfg.Level = zap.NewAtomicLevelAt(lvl)
	}
	return cfg.Build()
}
