package transport

import (
	"testing"
	"time"
)

func TestReconnectDelayBackoffWithJitter(t *testing.T) {
	for attempt := 0; attempt < 40; attempt++ {
		want := reconnectMax
		if attempt < 8 {
			want = min(reconnectMax, reconnectBase<<attempt)
		}
		seen := map[time.Duration]bool{}
		for i := 0; i < 50; i++ {
			d := ReconnectDelay(attempt)
			if d < want/2 || d > want {
				t.Fatalf("attempt %d: delay %v outside [%v, %v]", attempt, d, want/2, want)
			}
			seen[d] = true
		}
		if len(seen) < 2 {
			t.Fatalf("attempt %d: no jitter", attempt)
		}
	}
}

func TestConnectRejectsBadAgentID(t *testing.T) {
	if _, err := Connect(Options{AgentID: "a.b", URL: "nats://127.0.0.1:1"}); err == nil {
		t.Fatal("agent id with a dot accepted")
	}
}
