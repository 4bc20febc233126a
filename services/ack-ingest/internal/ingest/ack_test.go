package ingest

import (
	"testing"
	"time"

	"github.com/configsync/configsync/libs/protocol"
)

func TestNewAckAppliesIngestRules(t *testing.T) {
	received := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name      string
		status    string
		errText   string
		appliedAt time.Time
		wantError string
		wantAt    time.Time
	}{
		{"applied, in the past", protocol.AckApplied, "ignored", received.Add(-time.Minute), "", received.Add(-time.Minute)},
		{"applied within the skew allowance", protocol.AckApplied, "", received.Add(ClockSkewAllowance), "", received.Add(ClockSkewAllowance)},
		{"applied beyond the skew allowance", protocol.AckApplied, "", received.Add(ClockSkewAllowance + time.Second), "", received},
		{"no applied_at", protocol.AckApplied, "", time.Time{}, "", received},
		{"before 2000", protocol.AckApplied, "", time.Date(1999, 12, 31, 0, 0, 0, 0, time.UTC), "", received},
		{"failed with text", protocol.AckFailed, "dial tcp: refused", received.Add(-time.Second), "dial tcp: refused", received.Add(-time.Second)},
		{"failed without text", protocol.AckFailed, "", received, UnspecifiedError, received},
	}
	for _, c := range cases {
		a := NewAck("agent", "labels", 3, c.status, c.errText, c.appliedAt, received)
		if a.Error != c.wantError || !a.AppliedAt.Equal(c.wantAt) || !a.ReceivedAt.Equal(received) ||
			a.AgentID != "agent" || a.ConfigType != "labels" || a.Version != 3 || a.Status != c.status {
			t.Errorf("%s: %+v, want error %q applied at %v", c.name, a, c.wantError, c.wantAt)
		}
	}
}
