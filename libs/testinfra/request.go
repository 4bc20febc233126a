package testinfra

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// RequestJSON sends body on subject (encoded as JSON; a []byte is sent as it is) and returns the reply.
// No reply within timeout fails the test; an error reply is returned for the caller to check.
func RequestJSON(t testing.TB, nc *nats.Conn, subject string, body any, timeout time.Duration) *nats.Msg {
	t.Helper()
	data, ok := body.([]byte)
	if !ok {
		var err error
		if data, err = json.Marshal(body); err != nil {
			t.Fatalf("testinfra: encode %s request: %v", subject, err)
		}
	}
	msg, err := nc.Request(subject, data, timeout)
	if err != nil {
		t.Fatalf("request %s: %v", subject, err)
	}
	return msg
}
