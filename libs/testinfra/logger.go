package testinfra

import (
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// Logger returns a debug-level zap logger that writes to t.Log and records every entry; tests search the
// entries, for instance to prove a planted secret never reached the logs. Entries written after the test
// and its cleanups finished (a straggling goroutine) are still recorded but no longer sent to t.Log,
// which would panic.
func Logger(t testing.TB) (*zap.Logger, *observer.ObservedLogs) {
	t.Helper()
	observed, logs := observer.New(zapcore.DebugLevel)
	w := &testWriter{t: t}
	t.Cleanup(w.stop)
	enc := zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig())
	tcore := zapcore.NewCore(enc, w, zapcore.DebugLevel)
	return zap.New(zapcore.NewTee(tcore, observed), zap.AddCaller()), logs
}

type testWriter struct {
	t       testing.TB
	mu      sync.RWMutex
	stopped bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if !w.stopped {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) Sync() error { return nil }

func (w *testWriter) stop() {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
}
