package testinfra

import (
	"encoding/base64"
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

// AssertNotLogged renders every recorded entry as a production JSON log line (message and every field,
// whatever its type) and fails the test for each one that holds a secret, plainly or base64-encoded.
// The failure names the entry's message, never the line (which holds the secret).
func AssertNotLogged(t testing.TB, logs *observer.ObservedLogs, secrets ...string) {
	t.Helper()
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	for _, e := range logs.All() {
		buf, err := enc.EncodeEntry(e.Entry, e.Context)
		if err != nil {
			t.Fatal(err)
		}
		line := buf.String()
		buf.Free()
		for _, secret := range secrets {
			for _, form := range []string{secret, base64.StdEncoding.EncodeToString([]byte(secret)), base64.RawURLEncoding.EncodeToString([]byte(secret))} {
				if strings.Contains(line, form) {
					t.Errorf("the log entry %q holds a secret", e.Message)
				}
			}
		}
	}
}
