package protocol

import (
	"encoding/json"
	"testing"
	"time"
)

func TestOnlineFollowsTheHostsOwnInterval(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := now.Add(-d); return &t }
	for _, c := range []struct {
		last     *time.Time
		interval time.Duration
		want     bool
	}{
		{nil, 0, false},
		{at(90 * time.Second), 0, true},
		{at(91 * time.Second), 0, false},
		{at(91 * time.Second), time.Second, false},    // a short interval never shrinks the window
		{at(14 * time.Minute), 5 * time.Minute, true}, // three 5 minute intervals
		{at(16 * time.Minute), 5 * time.Minute, false},
	} {
		if got := Online(now, c.last, 90*time.Second, c.interval); got != c.want {
			t.Errorf("Online(last %v, interval %s) = %v, want %v", c.last, c.interval, got, c.want)
		}
	}
}

func TestHeartbeatIntervalIsOptional(t *testing.T) {
	var hb Heartbeat
	if err := json.Unmarshal([]byte(`{"config_hash":"h","config_versions":{"labels":1}}`), &hb); err != nil || hb.HeartbeatIntervalMS != 0 {
		t.Fatalf("spec heartbeat: %+v, %v", hb, err)
	}
	if err := json.Unmarshal([]byte(`{"config_hash":"h","heartbeat_interval_ms":300000}`), &hb); err != nil || hb.HeartbeatIntervalMS != 300000 {
		t.Fatalf("with interval: %+v, %v", hb, err)
	}
	b, _ := json.Marshal(Heartbeat{ConfigHash: "h"})
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	if _, ok := m["heartbeat_interval_ms"]; ok {
		t.Fatalf("an unset interval is sent: %s", b)
	}
}
