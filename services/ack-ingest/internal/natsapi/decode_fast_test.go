package natsapi

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/configsync/configsync/libs/protocol"
)

// agentHeartbeat is a heartbeat as the agent (and loadgen) encode it.
func agentHeartbeat(tb testing.TB) []byte {
	tb.Helper()
	b, err := json.Marshal(protocol.Heartbeat{AgentID: agent, SentAt: time.Date(2026, 12, 2, 2, 30, 0, 123456789, time.UTC),
		AgentVersion: "loadgen/1.0.0+hb.42", ConfigHash: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		ConfigVersion: 17, ConfigVersions: map[string]int64{"collectors": 17, "labels": 3, "intervals": 2}, HeartbeatIntervalMS: 30000})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// heartbeatSeeds are inputs on both sides of the fast path's edge: each is taken by the fast path
// and must decode as encoding/json does, or is left to encoding/json.
var heartbeatSeeds = []string{
	`{"agent_version":"1.0.0","config_hash":"a1b2","config_version":3,"config_versions":{"collectors":5}}`,
	` { "agent_id" : "a" , "config_hash":"h" ,"config_versions" : { } , "heartbeat_interval_ms" : 0 } `,
	`{}`,
	`{"config_versions":{"a":1,"a":2}}`,
	`{"config_hash":"h","config_hash":"i"}`,
	`{"Config_Hash":"h"}`,
	`{"config_hash":"h","extra":true}`,
	`{"config_hash":"\u0068"}`,
	`{"config_hash":"é"}`,
	`{"config_version":1.0}`,
	`{"config_version":1e3}`,
	`{"config_version":01}`,
	`{"config_version":-0}`,
	`{"config_version":-}`,
	`{"config_version":123456789012345678}`,
	`{"config_version":1234567890123456789}`,
	`{"config_version":null}`,
	`{"config_versions":null}`,
	`{"sent_at":"2026-01-01T00:00:00Z"}`,
	`{"sent_at":"2026-01-01T00:00:00.5+02:00"}`,
	`{"sent_at":"yesterday"}`,
	`{"sent_at":"2026-01-01 00:00:00Z"}`,
	`{"config_hash":"h",}`,
	`{"config_hash":"h"} x`,
	`{"config_versions":{"a":1,}}`,
	`{"config_versions":{"a":"1"}}`,
	`null`,
	`[]`,
	`{"config_hash":"h"`,
}

func TestDecodeHeartbeatFastTakesAgentHeartbeats(t *testing.T) {
	takesFastPath(t, decodeHeartbeatFast, agentHeartbeat(t))
	leavesFastPath(t, decodeHeartbeatFast, `{"config_hash":"\u0068"}`, `{"Config_Hash":"h"}`, `{"config_hash":"h","config_hash":"i"}`, `{"config_version":1.0}`, `null`, `{"sent_at":"yesterday"}`)
}

// FuzzDecodeHeartbeatFast checks that whatever the fast path accepts, encoding/json decodes to the
// same heartbeat.
func FuzzDecodeHeartbeatFast(f *testing.F) {
	f.Add(agentHeartbeat(f))
	for _, s := range heartbeatSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := decodeHeartbeatFast(data)
		if !ok {
			return
		}
		var want *protocol.Heartbeat
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("fast path accepted what encoding/json refuses (%v): %q", err, data)
		}
		if want == nil || !reflect.DeepEqual(got, *want) {
			t.Fatalf("%q: fast path %+v, encoding/json %+v", data, got, want)
		}
	})
}

func BenchmarkDecodeHeartbeat(b *testing.B) {
	data := agentHeartbeat(b)
	subject := protocol.HeartbeatSubject(agent)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeHeartbeat(subject, data, stored); err != nil {
			b.Fatal(err)
		}
	}
}

// agentAck is an ack as the agent (and loadgen) encode it.
func agentAck(tb testing.TB, status, errText string) []byte {
	tb.Helper()
	b, err := json.Marshal(protocol.Ack{AgentID: agent, ConfigType: "collectors", Version: 42, Status: status, Error: errText,
		AppliedAt: time.Date(2026, 12, 2, 2, 45, 0, 987654321, time.UTC)})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func TestDecodeAckFastTakesAgentAcks(t *testing.T) {
	for _, data := range [][]byte{agentAck(t, protocol.AckApplied, ""), agentAck(t, protocol.AckFailed, "dial tcp: connection refused")} {
		takesFastPath(t, decodeAckFast, data)
	}
	leavesFastPath(t, decodeAckFast, `{"error":"a\nb"}`, `{"Status":"applied"}`, `{"version":2,"version":3}`, `{"version":"1"}`, `{"applied_at":"yesterday"}`, `{"status":null}`)
}

// FuzzDecodeAckFast checks that whatever the fast path accepts, encoding/json decodes to the same ack.
func FuzzDecodeAckFast(f *testing.F) {
	f.Add(agentAck(f, protocol.AckApplied, ""))
	f.Add(agentAck(f, protocol.AckFailed, "exit status 1"))
	for _, s := range []string{`{"agent_id":"a","config_type":"labels","version":1,"status":"applied"}`, `{}`, ` {"version" : -0 } `,
		`{"error":"x","error":"y"}`, `{"applied_at":"2026-01-01T00:00:00+01:00"}`, `{"applied_at":"2026-01-01T00:00:00"}`, `{"version":1.5}`,
		`{"agent_id":"\u0061"}`, `{"agent_id":"a"}x`, `{"agent_id":"a",}`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := decodeAckFast(data)
		if !ok {
			return
		}
		var want protocol.Ack
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("fast path accepted what encoding/json refuses (%v): %q", err, data)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: fast path %+v, encoding/json %+v", data, got, want)
		}
	})
}

func BenchmarkDecodeAck(b *testing.B) {
	data := agentAck(b, protocol.AckApplied, "")
	subject := protocol.AckSubject(agent)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeAck(subject, data, stored); err != nil {
			b.Fatal(err)
		}
	}
}

// takesFastPath checks that fast decodes data, an agent's own message, and to what encoding/json
// decodes.
func takesFastPath[T any](t *testing.T, fast func([]byte) (T, bool), data []byte) {
	t.Helper()
	got, ok := fast(data)
	if !ok {
		t.Fatalf("the agent's own message left the fast path: %s", data)
	}
	var want T
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("fast path %+v, encoding/json %+v", got, want)
	}
}

// leavesFastPath checks that fast turns every input down (the general decoder handles them).
func leavesFastPath[T any](t *testing.T, fast func([]byte) (T, bool), inputs ...string) {
	t.Helper()
	for _, s := range inputs {
		if _, ok := fast([]byte(s)); ok {
			t.Errorf("%s took the fast path", s)
		}
	}
}
