package delivery_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

// oversized is a JSON object of about n bytes whose only member is padding.
func oversized(prefix string, n int) []byte {
	return []byte(`{` + prefix + `"pad":"` + strings.Repeat("P", n) + `"}`)
}

// Wrong-typed and oversized fetch requests are answered with invalid_request (never echoing the
// payload), and delivery keeps answering fetches.
func TestMalformedFetchRequestsAreRefused(t *testing.T) {
	s := newRunningStack(t, 1)
	agent := s.hosts[0].agent
	for name, body := range map[string][]byte{
		"agent_id a number":      []byte(`{"agent_id":7}`),
		"agent_id an array":      []byte(`{"agent_id":["` + agent + `"]}`),
		"agent_id an object":     []byte(`{"agent_id":{"id":"` + agent + `"}}`),
		"agent_id null":          []byte(`{"agent_id":null}`),
		"an array":               []byte(`["` + agent + `"]`),
		"a string":               []byte(`"` + agent + `"`),
		"a number":               []byte(`42`),
		"null":                   []byte(`null`),
		"binary":                 {0xff, 0xfe, 0x00, 0x7b},
		"over the 4 KiB limit":   oversized(`"agent_id":"`+agent+`",`, 5<<10),
		"near the max payload":   oversized(`"agent_id":"`+agent+`",`, 900<<10),
		"binary near the max":    []byte(strings.Repeat("\x00\xff", 450<<10)),
		"agent_id deeply nested": []byte(`{"agent_id":` + strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + `}`),
		"valid then garbage":     []byte(`{"agent_id":"` + agent + `"} {"agent_id":"x"}`),
		"agent_id of wrong case": []byte(`{"Agent_ID":7}`),
	} {
		t.Run(name, func(t *testing.T) {
			msg, err := testinfra.RequestAsAgent(s.nc, agent, protocol.FetchSubject(agent), body, 15*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var r protocol.FetchReply
			if err := json.Unmarshal(msg.Data, &r); err != nil || r.Error == nil || r.Error.Code != protocol.CodeInvalidRequest {
				t.Fatalf("reply %.300s", msg.Data)
			}
			if strings.Contains(r.Error.Message, "PPPP") || len(msg.Data) > 1024 {
				t.Fatalf("the error echoes the payload: %.300s", msg.Data)
			}
		})
	}
	s.putEnv(t, "tracing", `{"enabled":true,"sample_ratio":0.1}`)
	if r := s.fetch(t, agent, agent); r.Error != nil || r.Configs["tracing"] == nil {
		t.Fatalf("fetch after malformed ones: %+v", r)
	}
}

// Wrong-typed and oversized config-change events are terminated (not redelivered forever), and the
// next valid event is pushed.
func TestMalformedEventsAreTerminated(t *testing.T) {
	s := newRunningStack(t, 3)
	env := `"environment_id":"` + s.envID.String() + `"`
	bad := map[string][]byte{
		"event_id a number":       []byte(`{"event_id":1,"scope":"environment",` + env + `,"config_type":"labels","version":1}`),
		"scope an array":          []byte(`{"event_id":"e","scope":["environment"],` + env + `,"config_type":"labels","version":1}`),
		"environment_id a number": []byte(`{"event_id":"e","scope":"environment","environment_id":5,"config_type":"labels","version":1}`),
		"host_id a boolean":       []byte(`{"event_id":"e","scope":"host",` + env + `,"host_id":true,"config_type":"labels","version":1}`),
		"config_type a number":    []byte(`{"event_id":"e","scope":"environment",` + env + `,"config_type":7,"version":1}`),
		"version a string":        []byte(`{"event_id":"e","scope":"environment",` + env + `,"config_type":"labels","version":"1"}`),
		"version a fraction":      []byte(`{"event_id":"e","scope":"environment",` + env + `,"config_type":"labels","version":1.5}`),
		"deleted a string":        []byte(`{"event_id":"e","scope":"environment",` + env + `,"config_type":"labels","version":1,"deleted":"yes"}`),
		"occurred_at not a time":  []byte(`{"event_id":"e","scope":"environment",` + env + `,"config_type":"labels","version":1,"occurred_at":"yesterday"}`),
		"an array":                []byte(`[]`),
		"a string":                []byte(`"labels"`),
		"null":                    []byte(`null`),
	}
	// The events stream refuses what is over its message size limit, so such an event never reaches
	// delivery at all.
	tooBig := map[string][]byte{
		"over the 64 KiB limit": oversized(`"event_id":"e","scope":"environment",`+env+`,"config_type":"labels","version":1,`, 70<<10),
		"near the max payload":  oversized(`"event_id":"e","scope":"environment",`+env+`,"config_type":"labels","version":1,`, 900<<10),
		"binary near the max":   []byte(strings.Repeat("\x00\xff", 450<<10)),
	}
	for _, body := range bad {
		s.publishEvent(t, body)
	}
	for name, body := range tooBig {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := s.js.Publish(ctx, protocol.ConfigChangedSubject, body)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "maximum") {
			t.Errorf("%s: the events stream stored a %d byte event (err %v)", name, len(body), err)
		}
	}
	v := s.putEnv(t, "labels", `{"static":{"tier":"web"}}`)
	s.changed(t, protocol.ConfigChanged{Scope: protocol.ScopeEnvironment, ConfigType: "labels", Version: v})
	s.eventsSettled(t)

	if n := s.logs.FilterMessage("malformed config-change event terminated").Len(); n != len(bad) {
		t.Errorf("%d malformed events terminated, want %d", n, len(bad))
	}
	for _, h := range s.hosts {
		if n := len(s.fleet.commands(h.agent, "labels")); (n == 1) != h.online {
			t.Errorf("%s (online %v) received %d pushes after the malformed events", h.agent, h.online, n)
		}
	}
	for _, e := range s.logs.All() {
		for _, f := range e.Context {
			if strings.Contains(f.String, "PPPP") {
				t.Fatalf("a log entry echoes the payload: %s %v", e.Message, e.Context)
			}
		}
	}
}
