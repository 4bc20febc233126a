package fleet

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/configsync/configsync/libs/protocol"
)

func TestEncodeHeartbeatIsJSONMarshal(t *testing.T) {
	at := time.Date(2026, 12, 2, 3, 0, 0, 120000000, time.UTC)
	for _, hb := range []protocol.Heartbeat{
		{AgentID: "lg-1-7", SentAt: at, AgentVersion: "loadgen/1.0.0+hb.3", ConfigHash: "ab12", ConfigVersion: 9,
			ConfigVersions: map[string]int64{"labels": 3, "collectors": 9, "intervals": 2}},
		{AgentID: "a", SentAt: at.Truncate(time.Second), ConfigVersions: map[string]int64{}},
		{AgentID: "a", SentAt: at.In(time.FixedZone("x", 3600)), ConfigVersion: -1, HeartbeatIntervalMS: 30000},
		{AgentID: "a", AgentVersion: "v<1>&\"q\"", ConfigHash: "é\n", ConfigVersions: map[string]int64{"a&b": 1}},
		{},
	} {
		got, err := encodeHeartbeat(hb)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(hb)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("encodeHeartbeat:\n%s\njson.Marshal:\n%s", got, want)
		}
	}
}

func TestEncodeFetchRequestIsJSONMarshal(t *testing.T) {
	for _, id := range []string{"lg-20261202t114455-6948-000001", "a", "", "a_B-9", "x\"y", "<&>", "é\n", "\x7f", "\xff"} {
		got, err := encodeFetchRequest(id)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(protocol.FetchRequest{AgentID: id})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("encodeFetchRequest(%q) = %s, json.Marshal %s", id, got, want)
		}
	}
}

func BenchmarkEncodeHeartbeat(b *testing.B) {
	hb := protocol.Heartbeat{AgentID: "lg-20261202-12345", SentAt: time.Now().UTC(), AgentVersion: "loadgen/1.0.0+hb.42",
		ConfigHash: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", ConfigVersion: 9,
		ConfigVersions: map[string]int64{"labels": 3, "collectors": 9, "intervals": 2}}
	b.Run("encodeHeartbeat", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := encodeHeartbeat(hb); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(hb); err != nil {
				b.Fatal(err)
			}
		}
	})
}
