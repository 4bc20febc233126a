// Package logging builds ConfigSync's zap logger from configuration. Messages are static and values go
// into fields, so logs stay searchable; payloads and credentials are never logged.
package logging

import (
	"fmt"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Config selects the log level and encoding.
type Config struct {
	// Level is one of debug, info, warn, error.
	Level string `env:"LOG_LEVEL" default:"info"`
	// Format is json (production) or console (human readable, for development).
	Format string `env:"LOG_FORMAT" default:"json"`
}

// New returns a logger writing to stderr at the configured level and format.
func New(cfg Config) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(strings.TrimSpace(cfg.Level))
	if err != nil {
		return nil, fmt.Errorf("logging: LOG_LEVEL: %w", err)
	}
	var zc zap.Config
	switch strings.ToLower(strings.TrimSpace(cfg.Format)) {
	case "", "json":
		zc = zap.NewProductionConfig()
		zc.EncoderConfig.TimeKey = "ts"
		zc.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	case "console":
		zc = zap.NewDevelopmentConfig()
		// Development mode would print a stack trace for every warning (a NATS reconnect, say); keep
		// them for errors, as production does.
		zc.Development = false
	default:
		return nil, fmt.Errorf("logging: LOG_FORMAT %q: want json or console", cfg.Format)
	}
	zc.Level = zap.NewAtomicLevelAt(level)
	// Sampling would silently drop repeated errors (e.g. a flapping dependency); keep every entry.
	zc.Sampling = nil
	log, err := zc.Build()
	if err != nil {
		return nil, fmt.Errorf("logging: build: %w", err)
	}
	return log, nil
}
