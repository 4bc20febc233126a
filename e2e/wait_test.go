package e2e

import (
	"encoding/json"
	"testing"
	"time"
)

// Deadlines of the polls. Generous for a loaded 2-core machine; a healthy run meets each in a fraction.
const (
	readyTimeout    = 45 * time.Second // a process answering /readyz
	convergeTimeout = 30 * time.Second // a write reaching agents and their acks reaching the API
	recoverTimeout  = 60 * time.Second // after NATS or a replica comes back or goes away
	pollEvery       = 150 * time.Millisecond
)

// eventually polls check until it reports ok, or fails the test after timeout with what was awaited
// and the last state check described. Before each poll it fails fast when a process died unexpectedly
// (alive may be nil).
func eventually(t testing.TB, timeout time.Duration, what string, alive func() error, check func() (state string, ok bool)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	start := time.Now()
	var state string
	for {
		if alive != nil {
			if err := alive(); err != nil {
				t.Fatalf("waiting for %s: %v\nlast state: %s", what, err, state)
			}
		}
		var ok bool
		state, ok = check()
		if ok {
			t.Logf("%s: after %s", what, time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s\nlast state: %s", timeout, what, state)
		}
		time.Sleep(pollEvery)
	}
}

// decodeLogLine decodes one JSON log line (zap or slog).
func decodeLogLine(line []byte) (map[string]any, bool) {
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		return nil, false
	}
	return m, true
}

// jsonString renders v for failure messages.
func jsonString(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "<unencodable>"
	}
	return string(b)
}
