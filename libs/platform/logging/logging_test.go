package logging

import (
	"testing"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestNew(t *testing.T) {
	tests := []struct {
		cfg     Config
		enabled zapcore.Level
		off     zapcore.Level
	}{
		{Config{Level: "info", Format: "json"}, zapcore.InfoLevel, zapcore.DebugLevel},
		{Config{Level: "debug", Format: "console"}, zapcore.DebugLevel, zapcore.DebugLevel - 1},
		{Config{Level: " WARN ", Format: "JSON"}, zapcore.WarnLevel, zapcore.InfoLevel},
		{Config{Level: "error", Format: ""}, zapcore.ErrorLevel, zapcore.WarnLevel},
	}
	for _, tt := range tests {
		log, err := New(tt.cfg)
		if err != nil {
			t.Fatalf("New(%+v): %v", tt.cfg, err)
		}
		if !log.Core().Enabled(tt.enabled) || log.Core().Enabled(tt.off) {
			t.Errorf("New(%+v): level %v should be enabled and %v not", tt.cfg, tt.enabled, tt.off)
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{{Level: "loud", Format: "json"}, {Level: "info", Format: "xml"}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

func TestModule(t *testing.T) {
	t.Setenv("LOG_LEVEL", "warn")
	var log *zap.Logger
	app := fxtest.New(t, Module, fx.Populate(&log))
	app.RequireStart().RequireStop()
	if log == nil || log.Core().Enabled(zapcore.InfoLevel) || !log.Core().Enabled(zapcore.WarnLevel) {
		t.Fatal("Module did not provide a logger configured from LOG_LEVEL")
	}

	t.Setenv("LOG_LEVEL", "nonsense")
	app2 := fx.New(Module, fx.Populate(&log))
	if app2.Err() == nil {
		t.Fatal("an invalid LOG_LEVEL should fail application start")
	}
}
