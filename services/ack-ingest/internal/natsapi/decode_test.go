package natsapi

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/ack-ingest/internal/ingest"
)

const agent = "550e8400-e29b-41d4-a716-446655440000"

var stored = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func TestDecodeAck(t *testing.T) {
	subject := protocol.AckSubject(agent)
	good := `{"agent_id":"` + agent + `","config_type":"collectors","version":5,"status":"failed","error":"dial tcp: connection refused"}`
	a, err := decodeAck(subject, []byte(good), stored)
	if err != nil {
		t.Fatal(err)
	}
	if a.AgentID != agent || a.ConfigType != "collectors" || a.Version != 5 || a.Status != "failed" ||
		a.Error != "dial tcp: connection refused" || !a.AppliedAt.Equal(stored) || !a.ReceivedAt.Equal(stored) {
		t.Fatalf("decoded %+v", a)
	}
	applied := `{"agent_id":"` + agent + `","config_type":"labels","version":2,"status":"applied","error":"ignored","applied_at":"2026-05-01T11:59:00Z"}`
	a, err = decodeAck(subject, []byte(applied), stored)
	if err != nil {
		t.Fatal(err)
	}
	if a.Error != "" || !a.AppliedAt.Equal(stored.Add(-time.Minute)) {
		t.Fatalf("applied ack decoded %+v", a)
	}
	nul := `{"agent_id":"` + agent + `","config_type":"labels","version":2,"status":"failed","error":"bad\u0000byte ` + strings.Repeat("x", 5000) + `"}`
	a, err = decodeAck(subject, []byte(nul), stored)
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsRune(a.Error, 0) || len(a.Error) > maxErrorText {
		t.Fatalf("error text not cleaned: %d bytes", len(a.Error))
	}

	bad := map[string]struct{ subject, body string }{
		"not json":         {subject, `{"agent_id":`},
		"other agent":      {subject, `{"agent_id":"someone-else","config_type":"labels","version":1,"status":"applied"}`},
		"no agent":         {subject, `{"config_type":"labels","version":1,"status":"applied"}`},
		"bad status":       {subject, `{"agent_id":"` + agent + `","config_type":"labels","version":1,"status":"done"}`},
		"zero version":     {subject, `{"agent_id":"` + agent + `","config_type":"labels","version":0,"status":"applied"}`},
		"bad type":         {subject, `{"agent_id":"` + agent + `","config_type":"La bels","version":1,"status":"applied"}`},
		"version string":   {subject, `{"agent_id":"` + agent + `","config_type":"labels","version":"1","status":"applied"}`},
		"bad subject":      {"configsync.agent", `{"agent_id":"` + agent + `","config_type":"labels","version":1,"status":"applied"}`},
		"array":            {subject, `[]`},
		"too large":        {subject, `{"error":"` + strings.Repeat("x", maxMessageBytes) + `"}`},
		"bad applied time": {subject, `{"agent_id":"` + agent + `","config_type":"labels","version":1,"status":"applied","applied_at":"yesterday"}`},
	}
	for name, c := range bad {
		if _, err := decodeAck(c.subject, []byte(c.body), stored); !errors.Is(err, errMalformed) {
			t.Errorf("%s: err = %v, want malformed", name, err)
		}
	}
}

func TestDecodeAckErrorNeverEchoesPayload(t *testing.T) {
	_, err := decodeAck(protocol.AckSubject(agent), []byte(`{"agent_id":"`+agent+`","config_type":"labels","version":1,"status":"applied","applied_at":"s3cr3t-value"}`), stored)
	if err == nil || strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("err = %v", err)
	}
}

func TestDecodeHeartbeat(t *testing.T) {
	subject := protocol.HeartbeatSubject(agent)
	// The spec's payload has no agent_id: the subject names the agent.
	spec := `{"agent_version":"1.0.0","config_hash":"a1b2c3","config_version":3,"config_versions":{"collectors":5,"intervals":2}}`
	h, err := decodeHeartbeat(subject, []byte(spec), stored)
	if err != nil {
		t.Fatal(err)
	}
	if h.AgentID != agent || h.ConfigVersion != 3 || h.ConfigVersions["collectors"] != 5 || !h.ReceivedAt.Equal(stored) {
		t.Fatalf("decoded %+v", h)
	}
	// sent_at is the agent's clock: last_heartbeat_at is the broker's time regardless.
	withSent := `{"agent_id":"` + agent + `","sent_at":"2030-01-01T00:00:00Z","agent_version":"1.0.0","config_hash":"x","config_version":1,"config_versions":{}}`
	h, err = decodeHeartbeat(subject, []byte(withSent), stored)
	if err != nil || !h.ReceivedAt.Equal(stored) {
		t.Fatalf("decoded %+v, %v", h, err)
	}
	bad := map[string]string{
		"other agent":      `{"agent_id":"x","config_hash":"h"}`,
		"negative version": `{"config_hash":"h","config_version":-1}`,
		"bad type key":     `{"config_hash":"h","config_versions":{"Bad Key":1}}`,
		"negative entry":   `{"config_hash":"h","config_versions":{"labels":-3}}`,
		"nul key":          `{"config_hash":"h","config_versions":{"lab\u0000els":1}}`,
		"not json":         `nope`,
		"null":             `null`,
		"no config_hash":   `{"agent_version":"1.0.0","config_version":1,"config_versions":{"labels":1}}`,
		"only unknown":     `{"something":"else"}`,
	}
	for name, body := range bad {
		if _, err := decodeHeartbeat(subject, []byte(body), stored); !errors.Is(err, errMalformed) {
			t.Errorf("%s: err = %v, want malformed", name, err)
		}
	}
}

func TestCleanText(t *testing.T) {
	if got := cleanText("héllo\x00\xff", 100); got != "héllo\uFFFD" {
		t.Errorf("cleanText = %q", got)
	}
	if got := cleanText("ééé", 3); got != "é" || !utf8.ValidString(got) {
		t.Errorf("cut = %q", got)
	}
}

// storable checks what the database needs of every decoded string.
func storable(t *testing.T, field, s string, limit int) {
	t.Helper()
	if !utf8.ValidString(s) || strings.ContainsRune(s, 0) || len(s) > limit {
		t.Fatalf("%s not storable: %q", field, s)
	}
}

// accepted checks a decode of a message received on subject: refused with an error marked malformed,
// or accepted for the subject's own agent. It reports whether the message was accepted.
func accepted(t *testing.T, subject, agentID string, err error) bool {
	t.Helper()
	if err != nil {
		if !errors.Is(err, errMalformed) {
			t.Fatalf("error not marked malformed: %v", err)
		}
		return false
	}
	if token, ok := protocol.AgentIDFromSubject(subject); !ok || token != agentID {
		t.Fatalf("agent %q accepted on subject %q", agentID, subject)
	}
	return true
}

func FuzzDecodeAck(f *testing.F) {
	f.Add(protocol.AckSubject(agent), []byte(`{"agent_id":"`+agent+`","config_type":"collectors","version":5,"status":"failed","error":"dial tcp"}`))
	f.Add(protocol.AckSubject("a"), []byte(`{"agent_id":"a","config_type":"labels","version":1,"status":"applied","applied_at":"2026-01-01T00:00:00Z"}`))
	f.Add(protocol.AckSubject("a"), []byte(`{"agent_id":"a","config_type":"labels","version":9223372036854775807,"status":"failed","error":"\u0000\ud800"}`))
	f.Add("configsync.agent.a.b.c", []byte(`null`))
	f.Fuzz(func(t *testing.T, subject string, data []byte) {
		a, err := decodeAck(subject, data, stored)
		if !accepted(t, subject, a.AgentID, err) {
			return
		}
		if !protocol.ValidConfigTypeName(a.ConfigType) || a.Version <= 0 {
			t.Fatalf("invalid ack accepted: %+v", a)
		}
		if (a.Status == protocol.AckFailed) == (a.Error == "") || (a.Status != protocol.AckFailed && a.Status != protocol.AckApplied) {
			t.Fatalf("status/error inconsistent: %q %q", a.Status, a.Error)
		}
		storable(t, "error", a.Error, maxErrorText)
		if a.AppliedAt.IsZero() || a.AppliedAt.After(stored.Add(ingest.ClockSkewAllowance)) {
			t.Fatalf("applied_at %v", a.AppliedAt)
		}
	})
}

func FuzzDecodeHeartbeat(f *testing.F) {
	f.Add(protocol.HeartbeatSubject(agent), []byte(`{"agent_version":"1.0.0","config_hash":"a1b2","config_version":3,"config_versions":{"collectors":5}}`))
	f.Add(protocol.HeartbeatSubject("a"), []byte(`{"agent_id":"a","sent_at":"2026-01-01T00:00:00Z","agent_version":"\u0000","config_hash":"\udfff","config_version":0,"config_versions":null}`))
	f.Add("x", []byte(`{}`))
	f.Fuzz(func(t *testing.T, subject string, data []byte) {
		h, err := decodeHeartbeat(subject, data, stored)
		if !accepted(t, subject, h.AgentID, err) {
			return
		}
		storable(t, "agent_version", h.AgentVersion, maxAgentVersion)
		storable(t, "config_hash", h.ConfigHash, maxConfigHash)
		if h.ConfigVersion < 0 || len(h.ConfigVersions) > maxConfigVersions || !h.ReceivedAt.Equal(stored) {
			t.Fatalf("invalid heartbeat accepted: %+v", h)
		}
		for k, v := range h.ConfigVersions {
			if !protocol.ValidConfigTypeName(k) || v < 0 {
				t.Fatalf("config_versions entry %q=%d accepted", k, v)
			}
		}
	})
}
