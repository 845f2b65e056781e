// Package logging builds the zap logger both binaries use: JSON in
// production, console when SVC_LOG_FORMAT=console. Components name their
// logger (logger.Named("gitsync")) and never log a secret.
package logging

import (
	"os"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// New returns a logger at level (debug, info, warn, error; default info).
func New(level string) (*zap.Logger, error) {
	cfg := zap.NewProductionConfig()
	if os.Getenv("SVC_LOG_FORMAT") == "console" {
		cfg = zap.NewDevelopmentConfig()
	}
	cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	cfg.Sampling = nil
	if level != "" {
		lvl, err := zapcore.ParseLevel(level)
		if err != nil {
			return nil, err
		}
		cfg.Level = zap.NewAtomicLevelAt(lvl)
	}
	return cfg.Build()
}
