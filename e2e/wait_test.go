package e2e

import (
	"encoding/json"
	"time"
)

// Deadlines of the waits (stack.eventually, through testinfra.EventuallyNoError). Generous for a loaded
// 2-core machine; a healthy run meets each in a fraction.
const (
	readyTimeout    = 45 * time.Second // a process answering /readyz
	convergeTimeout = 30 * time.Second // a write reaching agents and their acks reaching the API
	recoverTimeout  = 60 * time.Second // after NATS or a replica comes back or goes away
)

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
