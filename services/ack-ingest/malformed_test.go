package ackingest_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

// padded is a JSON object of about n bytes: members, then padding in an unknown field.
func padded(members string, n int) []byte {
	return []byte(`{` + members + `,"pad":"` + strings.Repeat("P", n) + `"}`)
}

// Every wrong-typed or oversized ack and heartbeat is terminated, none is written, and the messages
// after them are ingested.
func TestWrongTypedAndOversizedMessagesAreTerminated(t *testing.T) {
	s := newStack(t, 2)
	s.start(t)
	const okAck = `"agent_id":"agent-0","config_type":"labels","version":1,"status":"applied"`
	acks := map[string][]byte{
		"agent_id a number":      []byte(`{"agent_id":0,"config_type":"labels","version":1,"status":"applied"}`),
		"config_type an array":   []byte(`{"agent_id":"agent-0","config_type":["labels"],"version":1,"status":"applied"}`),
		"version a string":       []byte(`{"agent_id":"agent-0","config_type":"labels","version":"1","status":"applied"}`),
		"version a fraction":     []byte(`{"agent_id":"agent-0","config_type":"labels","version":1.5,"status":"applied"}`),
		"version out of range":   []byte(`{"agent_id":"agent-0","config_type":"labels","version":1e30,"status":"applied"}`),
		"status a boolean":       []byte(`{"agent_id":"agent-0","config_type":"labels","version":1,"status":true}`),
		"error an object":        []byte(`{"agent_id":"agent-0","config_type":"labels","version":1,"status":"failed","error":{"m":"x"}}`),
		"applied_at a number":    []byte(`{"agent_id":"agent-0","config_type":"labels","version":1,"status":"applied","applied_at":1}`),
		"an array":               []byte(`[{` + okAck + `}]`),
		"a string":               []byte(`"applied"`),
		"a number":               []byte(`1`),
		"null":                   []byte(`null`),
		"nested past any sanity": []byte(`{"agent_id":"agent-0","config_type":"labels","version":1,"status":` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}`),
	}
	const okHeartbeat = `"agent_version":"1.0.0","config_hash":"h","config_version":1`
	heartbeats := map[string][]byte{
		"agent_id a number":            []byte(`{"agent_id":1,` + okHeartbeat + `}`),
		"config_version a string":      []byte(`{"agent_version":"1.0.0","config_hash":"h","config_version":"1"}`),
		"config_versions an array":     []byte(`{` + okHeartbeat + `,"config_versions":["labels"]}`),
		"config_versions of strings":   []byte(`{` + okHeartbeat + `,"config_versions":{"labels":"1"}}`),
		"agent_version a number":       []byte(`{"agent_version":1,"config_hash":"h","config_version":1}`),
		"config_hash an object":        []byte(`{"agent_version":"1.0.0","config_hash":{},"config_version":1}`),
		"sent_at not a time":           []byte(`{` + okHeartbeat + `,"sent_at":"yesterday"}`),
		"too many config_versions":     []byte(`{` + okHeartbeat + `,"config_versions":{` + manyVersions(100) + `}}`),
		"an array":                     []byte(`[]`),
		"a string":                     []byte(`"alive"`),
		"config_versions nested deep":  []byte(`{` + okHeartbeat + `,"config_versions":` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}`),
		"config_versions over int64":   []byte(`{` + okHeartbeat + `,"config_versions":{"labels":99999999999999999999}}`),
		"config_version not a number":  []byte(`{"agent_version":"1.0.0","config_hash":"h","config_version":NaN}`),
		"config_versions key with NUL": []byte(`{` + okHeartbeat + `,"config_versions":{"lab\u0000els":1}}`),
	}
	for _, body := range acks {
		s.publish(t, protocol.AckSubject("agent-0"), body)
	}
	i := 0
	for _, body := range heartbeats {
		// The heartbeats stream keeps one message per subject: each bad heartbeat gets its own.
		s.publish(t, protocol.HeartbeatSubject(fmt.Sprintf("bad-%d", i)), body)
		i++
	}
	// The streams refuse what is over their message size limit: such a message never reaches ack-ingest.
	tooBig := map[string][]byte{
		"over the 64 KiB limit": padded(okAck, 64<<10),
		"near the max payload":  padded(okHeartbeat, 900<<10),
		"binary near the max":   []byte(strings.Repeat("\x00\xff", 450<<10)),
	}
	for name, body := range tooBig {
		for _, subject := range []string{protocol.AckSubject("agent-0"), protocol.HeartbeatSubject("big-0")} {
			reply, err := s.nc.Request(subject, body, 5*time.Second)
			if err == nil && !strings.Contains(string(reply.Data), "maximum") {
				t.Errorf("%s on %s: the stream stored a %d byte message: %s", name, subject, len(body), reply.Data)
			}
		}
	}
	s.publish(t, protocol.AckSubject("agent-1"), ack("agent-1", "labels", 2, protocol.AckApplied, ""))
	s.publish(t, protocol.HeartbeatSubject("agent-1"), heartbeat("agent-1", "after-bad", 2))
	s.drained(t)

	if n, want := s.logs.FilterMessage("malformed message terminated").Len(), len(acks)+len(heartbeats); n != want {
		t.Errorf("%d malformed messages terminated, want %d", n, want)
	}
	if _, ok := s.applyStatus(t, "agent-0", "labels"); ok {
		t.Error("a malformed ack was written")
	}
	if r, ok := s.applyStatus(t, "agent-1", "labels"); !ok || r.Version != 2 {
		t.Errorf("valid ack after the malformed ones: %+v %v", r, ok)
	}
	testinfra.EventuallyNoError(t, 30*time.Second, func() error {
		h := s.host(t, "agent-1")
		if h.ConfigHash != nil && *h.ConfigHash == "after-bad" {
			return nil
		}
		return fmt.Errorf("%+v", h)
	}, "heartbeat after the malformed ones")
	for _, e := range s.logs.All() {
		for _, f := range e.Context {
			if strings.Contains(f.String, "PPPP") {
				t.Fatalf("a log entry echoes the payload: %s %v", e.Message, e.Context)
			}
		}
	}
}

func manyVersions(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"t%d":1`, i)
	}
	return strings.Join(parts, ",")
}
